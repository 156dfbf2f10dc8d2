"""Writes over KV a live request verified (a mixin of the symbolic executor,
sim/symbolic.py): the request must read that KV again, and if it still maps the slot the
write went into shared KV (`block-pool.write-into-shared-block`). Two writers come here:
a step's write that `shadow_kernels.store_writes` counted as such an overwrite, and the
discarded step of a request the simulator retired while the engine still ran it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from schedcheck.engines.protocol import ScheduledRequest
from schedcheck.invariants import hash_model
from schedcheck.sim.bad_reads import BadReads
from schedcheck.sim.token_store import ShadowRequest

I64 = np.int64


class Overwrites(BadReads):
    """Finds who a write over verified KV hurt; reads and unverifies the executor's state."""

    shadow: np.ndarray
    verifiers: np.ndarray
    requests: Mapping[str, ShadowRequest]
    salt_identity: dict[str, int]
    current_table: Callable[[str], Sequence[int] | None] | None

    def _unverify(self, req: ShadowRequest, keep_len: int) -> None:
        raise NotImplementedError  # the executor's: keys from keep_len on are not verified

    def _write_discarded(self, step: int, discarded: Sequence[ScheduledRequest]) -> None:
        """KV writes of requests the simulator retired but the engine still runs (their
        output is discarded): each chunk's identities chain from the KV the request wrote
        at the position before the chunk, so a reader that later shares them (a prefix
        hit) checks them as any other KV. A write into KV a live request verified is a
        violation, as for any writer."""
        for r in discarded:
            assert r.slots is not None, r.request_id
            lo, hi = r.num_computed_tokens, r.num_end_tokens
            slots = np.asarray(r.slots[lo:hi], dtype=I64)
            prev = self._identity_before(r.request_id, r.slots, lo)
            ids = hash_model.identities(np.asarray(r.token_ids, I64), prev, lo)
            if lo and prev == 0:  # the chain's start was never written: nothing right to write
                ids ^= hash_model.POISON
            ok = (slots >= 0) & (slots < self.num_slots)
            hurt = self._hurt_by_discarded(slots[ok])
            if hurt >= 0:
                self._violate(
                    "block-pool.write-into-shared-block",
                    step,
                    r.request_id,
                    f"the discarded step of aborted {r.request_id} writes slot {hurt}, "
                    "which holds KV a live request verified",
                    slot=hurt,
                )
            self.shadow[slots[ok]] = ids[ok]
            self.writer_req[slots[ok]] = -1
            self.writer_pos[slots[ok]] = np.arange(lo, hi, dtype=I64)[ok]
            self.writer_step[slots[ok]] = step

    def _hurt_by_discarded(self, slots: np.ndarray) -> int:
        """The first slot of a discarded write that holds KV a live request verified and
        still holds (-1 if none). A request that verified a slot but no longer maps it (the
        radix cache's dedup moved its row onto the tree's copy and freed the slot, which an
        aborted request's last step then took) is not hurt; it verifies again from there."""
        first = -1
        for slot in slots.tolist():  # bounded: the discarded chunk's slots
            if self.verifiers[slot // self.block_size] == 0:
                continue
            for name, req in self.requests.items():  # bounded: the live requests
                key = self._verified_key(req, slot)
                if key < 0:
                    continue
                if first < 0 and self._still_holds(name, key, slot):
                    first = slot
                self._unverify(req, key)
        return first

    def _identity_before(self, request_id: str, slots: Sequence[int], lo: int) -> int:
        """The identity a discarded chunk starting at position `lo` chains from: the KV at
        position lo - 1 (its slot), or the request's salt identity at position 0."""
        if lo == 0:
            return self.salt_identity.get(request_id, 0)
        slot = slots[lo - 1]
        return int(self.shadow[slot]) if 0 <= slot < self.num_slots else 0

    def _invalidate_overwritten(
        self, step: int, slots: np.ndarray, writers: np.ndarray, old: np.ndarray
    ) -> None:
        """A write changed a slot (one that held KV, old[w] != 0) in a block some other live
        request verified (`shadow_kernels.store_writes` counts them): that request must
        re-read it, and if it still maps the slot, the write was into shared KV.

        Write w was by the request of store index writers[w]. The common case, a request
        writing the stale rest of its own last, partly verified block (its position's own
        slot: past every key it verified there), never comes here; nor does a write into a
        block no live request verified. When slots are not their positions' slots (a runner
        bug), a write into the writer's own verified block may hit a verified key: it
        comes here too.
        """
        changed = old != 0
        kept = np.flatnonzero(changed)
        slots, writers = slots[kept], writers[kept]
        for name, req in self.requests.items():  # rare path: only on overwrites of verified KV
            for slot, writer in zip(slots.tolist(), writers.tolist(), strict=True):
                key = self._verified_key(req, slot)
                if key < 0:
                    continue
                if writer != req.index and self._still_holds(name, key, slot):
                    self._violate(
                        "block-pool.write-into-shared-block",
                        step,
                        self.req_names[writer],
                        f"writes slot {slot} of block {slot // self.block_size}, which holds "
                        f"key {key} of live request {name}",
                        slot=slot,
                        block=slot // self.block_size,
                    )
                self._unverify(req, key)

    def _verified_key(self, req: ShadowRequest, slot: int) -> int:
        """The key of `req` whose verified KV lies in `slot`, or -1."""
        block = slot // self.block_size
        index = next((i for i, b in enumerate(req.verified_table) if b == block), -1)
        key = index * self.block_size + slot % self.block_size if index >= 0 else -1
        return key if 0 <= key < req.verified_len else -1

    def _still_holds(self, request_id: str, key: int, slot: int) -> bool:
        """Does the request's *current* block table (as the engine has it now) still map
        `key` to `slot`'s block? A manager may have moved it off that block since it was
        verified (the radix cache's dedup onto the tree's pages) and freed the block."""
        if self.current_table is None:
            return True
        table = self.current_table(request_id)
        index = key // self.block_size
        return table is not None and index < len(table) and table[index] == slot // self.block_size
