"""The engine's own block events, step by step: what its KV snapshot changed.

Recorded only for a bundle that holds a violation (`sim/bundles.py` reruns the run with
`SimOptions.record_kv_events`), so clean runs pay nothing. After each step's
update_from_output, the snapshot is compared with the one before::

    {"step": 6, "ref_cnt": [[1, 1], [4, 0]], "cached": [[1, null], [4, "9f3e..."]]}

    ref_cnt   [block, new ref_cnt] for every block whose ref_cnt changed
    cached    [block, block hash (hex) or null] for every block that entered the prefix
              cache, left it (null: evicted or reused), or changed its hash
The report reads them (BUNDLE/kv_events.jsonl) to show the engine's view of a block beside
what the shadow KV says the block holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedcheck.engines.protocol import KVSnapshot


class KVEventRecorder:
    def __init__(self) -> None:
        self.ref_cnt: np.ndarray | None = None
        self.cached: dict[int, str] = {}
        self.events: list[dict[str, Any]] = []

    def observe(self, step: int, snapshot: KVSnapshot) -> None:
        ref_cnt = np.asarray(snapshot.ref_cnt(), dtype=np.int64)
        before = self.ref_cnt if self.ref_cnt is not None else np.zeros_like(ref_cnt)
        changed = np.flatnonzero(ref_cnt != before)
        cached = {int(b): bytes(h).hex() for b, h in snapshot.cached_blocks().items()}
        moved = sorted(
            b for b in cached.keys() | self.cached.keys() if cached.get(b) != self.cached.get(b)
        )
        self.ref_cnt, self.cached = ref_cnt.copy(), cached
        if changed.size or moved:
            self.events.append(
                {
                    "step": step,
                    "ref_cnt": [[int(b), int(ref_cnt[b])] for b in changed.tolist()],
                    "cached": [[b, cached.get(b)] for b in moved],
                }
            )
