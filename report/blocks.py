"""Per-block state derived from the replayed schedule: ref_cnt, written, cached.

    ref_cnt[b]  live requests whose block table holds b (the tables the engine handed out,
                kept until the request finishes, is preempted or rejected)
    full[b]     every slot of b holds a KV entry in the shadow KV
    cached[b]   ref_cnt 0 and full, with prefix caching on: its content could be a hit
    free        the rest

This is the pool as the schedule shows it; an engine's own free queue and hash map are not
in a bundle, so a block the engine forgot to cache still counts as cached here.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.sim.symbolic import SymbolicExecutor

I64 = np.int64


class BlockState:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.ref_cnt = np.zeros(num_blocks, dtype=I64)
        self.full = np.zeros(num_blocks, dtype=bool)

    def hold(self, table: Iterable[int], delta: int) -> None:
        """Add `delta` to the ref_cnt of each block of `table` in the cache."""
        ids = np.fromiter(table, I64)
        ids = ids[(ids >= 0) & (ids < self.num_blocks)]
        np.add.at(self.ref_cnt, ids, delta)

    def change_table(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        """A request's table went from `old` to `new` (appended blocks: the common case)."""
        keep = len(old) if new[: len(old)] == old else 0
        if keep < len(old):
            self.hold(old, -1)
        self.hold(new[keep:], +1)

    def after_writes(self, meta: RunnerMetadata, shadow: SymbolicExecutor) -> None:
        """Update `full` for the blocks this step wrote or copied into."""
        slots = np.concatenate([meta.slot_mapping, meta.lookahead_slot_mapping])
        blocks = slots[(slots >= 0) & (slots < self.num_blocks * self.block_size)]
        blocks = blocks // self.block_size
        copied = np.fromiter((dst for _, dst in meta.output.block_copies), I64)
        blocks = np.unique(np.concatenate([blocks, copied]))
        blocks = blocks[(blocks >= 0) & (blocks < self.num_blocks)]
        if blocks.size:
            self.full[blocks] = shadow.block_contents(blocks)[1]

    def cached(self) -> np.ndarray:
        """(num_blocks,) bool: free, full, prefix caching on."""
        if not self.prefix_caching:
            return np.zeros(self.num_blocks, dtype=bool)
        return (self.ref_cnt == 0) & self.full

    def state_of(self, block: int) -> str:
        if self.ref_cnt[block] > 0:
            return "in use"
        return "cached" if self.prefix_caching and self.full[block] else "free"
