"""The kernel replay's comparison and config rules (gpu/vllm_engine.py), without vLLM."""

from __future__ import annotations

from dataclasses import dataclass

from schedcheck.engines.protocol import EngineConfig, ScheduledRequest, SchedulerOutput
from schedcheck.gpu.vllm_engine import (
    compare_samples,
    kernel_block_size,
    kernel_config,
    kernel_pool_blocks,
    schedule_divergence,
)


@dataclass(frozen=True)
class Sample:  # the fields of engines/vllm/engine/build.KernelSample
    step: int
    top_ids: tuple[int, int]
    top_logprobs: tuple[float, float]
    forced_id: int
    forced_logprob: float


def test_block_sizes_go_to_the_nearest_multiple_of_32_keeping_the_pool_blocks() -> None:
    assert [kernel_block_size(b) for b in (1, 4, 16, 32, 40, 64)] == [32, 32, 32, 32, 32, 64]
    config, notes = kernel_config(EngineConfig(block_size=4, num_gpu_blocks=10))
    # its 10 blocks kept (36 usable tokens would fit 2 + the null block: one request at a time)
    assert (config.block_size, config.num_gpu_blocks) == (32, 10)
    assert notes[0].startswith("block size 4 re-run at 32")
    assert "pool 10 blocks -> 10 (its blocks kept" in notes[0]
    config, notes = kernel_config(EngineConfig(block_size=40, num_gpu_blocks=5))
    assert (config.block_size, config.num_gpu_blocks) == (32, 6)  # 160 usable tokens + null
    assert "its 160 usable tokens rounded up" in notes[0]
    assert kernel_config(EngineConfig(block_size=32, num_gpu_blocks=10)) == (
        EngineConfig(block_size=32, num_gpu_blocks=10),
        [],
    )


def test_every_set_co_resident_at_the_recorded_size_stays_co_resident_at_32() -> None:
    for block_size in (1, 2, 4, 8, 16):  # bounded: the swarm's sizes
        # a request of n tokens takes no more blocks at 32, and the pool keeps its blocks
        assert all(-(-n // 32) <= -(-n // block_size) for n in range(1, 300))
        assert all(kernel_pool_blocks(k, block_size, 32) >= k for k in range(2, 40))


def test_samples_within_tolerance_flips_and_near_ties() -> None:
    base = {
        ("a", 5): Sample(1, (7, 8), (-1.0, -3.0), 9, -5.0),
        ("a", 6): Sample(2, (7, 8), (-1.0, -1.00005), 9, -5.0),
        ("b", 3): Sample(1, (4, 5), (-0.5, -2.0), 4, -0.5),
    }
    same = {k: Sample(v.step, v.top_ids, v.top_logprobs, v.forced_id, v.forced_logprob + 1e-6)
            for k, v in base.items()}  # fmt: skip
    findings, max_ok, compared = compare_samples(same, base)
    assert (findings, compared) == ([], 3) and 0 < max_ok < 2e-6
    moved = dict(same)
    moved[("b", 3)] = Sample(1, (4, 5), (-0.9, -2.0), 4, -0.9)  # logprob 0.4 away
    moved[("a", 6)] = Sample(2, (8, 7), (-1.0, -1.00005), 9, -5.0)  # a flip inside the tie
    findings, _, _ = compare_samples(moved, base)
    assert [(f.request_id, f.position, f.kind, f.cls) for f in findings] == [
        ("a", 6, "token", "near-tie"),
        ("b", 3, "logprob", "misalignment"),
    ]


def _step(step: int, *chunks: tuple[str, int, int]) -> SchedulerOutput:
    reqs = tuple(
        ScheduledRequest(rid, computed, n, computed + n, computed + n, (1,) * n, (1,))
        for rid, computed, n in chunks
    )
    return SchedulerOutput(step=step, scheduled=reqs)


def test_the_first_schedule_difference_is_named_with_its_reasons() -> None:
    recorded = [_step(1, ("a", 0, 4)), _step(2, ("a", 4, 1), ("b", 0, 3))]
    assert schedule_divergence(recorded, recorded, True, []) is None
    ran = [_step(1, ("a", 0, 4)), _step(2, ("a", 4, 1))]
    out = schedule_divergence(recorded, ran, False, ["block size 4 re-run at 32"])
    assert out == {
        "step": 2,
        "what": "bundle ran {a[4:+1], b[0:+3]}; vLLM ran {a[4:+1]}",
        "why": ["block size 4 re-run at 32"],
    }
