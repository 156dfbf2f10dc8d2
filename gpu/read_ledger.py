"""Which key reads were already verified, so each step checks only what may have changed.

A key position j of request r that was verified at slot s when that slot's write count was
e needs no new check while the request still reads j from s and s was not written since:

    epoch[s]            writes to slot s so far (the zero block's slots are never written)
    verified[r]         (slot, epoch) per key position 0 .. of r's last checked read;
                        epoch -1 = failed, check again

A decode step then checks its one new key instead of its whole context; a slot that
another request overwrote (the bug class this hunts) changes its epoch and is checked.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


class ReadLedger:
    def __init__(self, num_slots: int):
        assert num_slots >= 1
        self.epoch = np.zeros(num_slots, dtype=np.int64)
        self.verified: dict[str, tuple[IntArray, IntArray]] = {}

    def wrote(self, slot_mapping: IntArray) -> None:
        """Count this step's writes (-1 = skipped)."""
        written = slot_mapping[slot_mapping >= 0]
        np.add.at(self.epoch, written, 1)

    def to_check(
        self, req_ids: tuple[str, ...], starts: IntArray, key_slots: IntArray
    ) -> npt.NDArray[np.bool_]:
        """(N,) True for every key that must be compared; request i's keys lie in
        [starts[i], starts[i+1]) in position order."""
        need = np.ones(key_slots.size, dtype=bool)
        for i, rid in enumerate(req_ids):
            prev = self.verified.get(rid)
            if prev is None:
                continue
            lo, hi = int(starts[i]), int(starts[i + 1])
            n = min(hi - lo, prev[0].size)
            slots = key_slots[lo : lo + n]
            same = (prev[0][:n] == slots) & (prev[1][:n] == self.epoch[slots])
            need[lo : lo + n] = ~same
        return need

    def mark(
        self,
        req_ids: tuple[str, ...],
        starts: IntArray,
        key_slots: IntArray,
        failed: npt.NDArray[np.bool_],
    ) -> None:
        """Remember every request's read as verified, except the keys that failed."""
        for i, rid in enumerate(req_ids):
            lo, hi = int(starts[i]), int(starts[i + 1])
            slots = key_slots[lo:hi]
            epochs = np.where(failed[lo:hi], -1, self.epoch[slots])
            self.verified[rid] = (slots.copy(), epochs)
