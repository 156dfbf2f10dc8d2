"""vLLM v1 behind the adapter, with its real free list corrupted once, when the first
request finishes: the request's tail block (just freed, so linked into the list) is
appended to vLLM's FreeKVCacheBlockQueue a second time. `planted` is (step, block)."""

from __future__ import annotations

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.vllm.v1.adapter import VllmV1Engine


class FreedTwiceEngine(VllmV1Engine):
    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.planted: tuple[int, int] | None = None
        self._tails: dict[str, int] = {}

    def schedule(self):
        output = super().schedule()
        for r in output.scheduled:
            self._tails[r.request_id] = r.block_table[-1]
        return output

    def update_from_output(self, output, sampled_token_ids):
        finished = super().update_from_output(output, sampled_token_ids)
        if self.planted is None and finished:
            pool = self.scheduler.kv_cache_manager.block_pool
            tail = self._tails[finished[0].request_id]
            assert pool.blocks[tail].ref_cnt == 0, "the tail block went back to the pool"
            pool.free_block_queue.append(pool.blocks[tail])  # vLLM's own list, corrupted
            self.planted = (output.step, tail)
        return finished


def make_engine(config: EngineConfig) -> FreedTwiceEngine:
    return FreedTwiceEngine(config)
