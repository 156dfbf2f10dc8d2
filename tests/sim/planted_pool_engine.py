"""The reference engine (hashed manager) with one block-pool error planted when the first
request finishes; `planted` records (step, block) so a test can assert where it is found.

    ref-cnt     free_blocks leaves one reference on the request's tail block
    lost        free_blocks drops the tail block instead of queueing it
    free-twice  the snapshot's free queue names the tail block twice (vLLM's linked list
                appended twice; ours refuses it, so it is planted in the view)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.reference.block_pool import BlockPool
from schedcheck.engines.reference.engine import ReferenceEngine
from schedcheck.engines.reference.snapshot import readonly_view


class _PlantedPool(BlockPool):
    __slots__ = ("armed_fault", "planted_block")

    def __init__(self, num_blocks: int, fault: str) -> None:
        super().__init__(num_blocks)
        self.armed_fault: str | None = fault
        self.planted_block = -1

    def free_blocks(self, ordered_block_ids: Sequence[int]) -> None:
        fault, self.armed_fault = self.armed_fault, None
        if fault in (None, "none") or not ordered_block_ids:
            super().free_blocks(ordered_block_ids)
            return
        tail = int(ordered_block_ids[0])  # freed first: the request's last block
        assert tail not in self.cached_hash_of_block, "plant on an uncached block"
        self.planted_block = tail
        if fault == "ref-cnt":
            super().free_blocks([b for b in ordered_block_ids if b != tail])  # not logged
        else:
            super().free_blocks(ordered_block_ids)
            if fault == "lost":
                self.free_block_queue.remove_many(np.array([tail], np.int64))


class _TwiceSnapshot:
    """The engine's snapshot, with `block` in its free queue a second time."""

    def __init__(self, snapshot, block: int) -> None:
        self._snapshot, self._block = snapshot, block

    def __getattr__(self, name):
        return getattr(self._snapshot, name)

    def free_block_ids(self) -> list[int]:
        return [*self._snapshot.free_block_ids(), self._block]

    def num_free_entries(self) -> int:
        return len(self._snapshot.free_block_ids()) + 1

    def is_free(self, ids: np.ndarray) -> np.ndarray:
        free = self._snapshot.free_block_ids()
        return np.fromiter((b in free for b in ids.tolist()), bool, ids.size)


class PlantedEngine(ReferenceEngine):
    def __init__(self, config: EngineConfig, fault: str) -> None:
        super().__init__(config)
        manager = self.kv_manager
        manager.block_pool = _PlantedPool(config.num_gpu_blocks, fault)
        manager._ref_cnt_view = readonly_view(manager.block_pool.ref_cnt)
        self.fault = fault
        self.planted: tuple[int, int] | None = None  # (step, block)

    def update_from_output(self, output, sampled_token_ids):
        finished = super().update_from_output(output, sampled_token_ids)
        block = self.kv_manager.block_pool.planted_block
        if self.planted is None and block >= 0:
            self.planted = (output.step, block)
        return finished

    def kv_snapshot(self):
        snapshot = super().kv_snapshot()
        if self.fault == "free-twice" and self.planted is not None:
            return _TwiceSnapshot(snapshot, self.planted[1])
        return snapshot


def make_ref_cnt_engine(config: EngineConfig) -> PlantedEngine:
    return PlantedEngine(config, "ref-cnt")


def make_lost_engine(config: EngineConfig) -> PlantedEngine:
    return PlantedEngine(config, "lost")


def make_free_twice_engine(config: EngineConfig) -> PlantedEngine:
    return PlantedEngine(config, "free-twice")


def make_clean_engine(config: EngineConfig) -> PlantedEngine:
    return PlantedEngine(config, "none")
