"""The incremental block-pool check on vLLM 0.33's own BlockPool (tox -e vllm-v1): it reads
only the blocks vLLM changed, agrees with the full sweep, and finds a block appended twice
to vLLM's real free list at the step it happens, with 200,000 blocks."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from vllm_driver import NEEDS_VLLM_V1, frees_unhashed_blocks_to_the_head, skip_unless_drafts

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, Simulation, run

pytestmark = NEEDS_VLLM_V1
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "invariants"))
from test_pool_delta import _trace  # noqa: E402  (the same six requests, shared prefixes)

CFG = EngineConfig(block_size=16, num_gpu_blocks=200_000, max_num_batched_tokens=64,
                   max_num_seqs=8, max_model_len=256)  # fmt: skip


@pytest.mark.parametrize("num_gpu_blocks", [6, 9, 200_000])  # 6, 9: preemption, eviction
def test_the_full_sweep_agrees_with_the_incremental_check(num_gpu_blocks):
    config = dataclasses.replace(CFG, num_gpu_blocks=num_gpu_blocks)
    runs = [
        run(_trace(), "vllm-v1", config, SimOptions(pool_check_interval_steps=n), profile("unit"))
        for n in (1, 0)
    ]
    full, incremental = runs
    assert incremental.fingerprint == full.fingerprint
    assert [v.to_json() for v in incremental.violations] == [v.to_json() for v in full.violations]
    assert incremental.exit_code == 0 and incremental.finished == 6


def test_a_block_appended_twice_to_vllms_free_list_is_found_at_its_step():
    """r0's tail block 3 (freed at step 6, prepended to the free list) is appended again:
    the list's own count is 199,990 (199,989 free blocks + the duplicate: 10 blocks held
    by r1..r5), and a walk from its head now meets block 3 and then the tail, so the
    blocks linked after it before are unreachable, the first of them block 12."""
    sim = Simulation(_trace(), "planted_v1_engine:make_engine", CFG, SimOptions(), profile("unit"))
    result = sim.run()
    assert sim.engine.planted == (6, 3)
    found = [(v.invariant, v.step, v.block, v.message) for v in result.violations]
    if not frees_unhashed_blocks_to_the_head():
        # before 0.2x block 3 was appended at the tail when freed: appended again, the walk
        # still reaches every block and finds one entry short of the count
        assert found == [
            (
                "block-pool.free-queue",
                6,
                -1,
                "the free queue counts 199990 entries but holds 199989: a block was linked "
                "in twice or unlinked unseen",
            )
        ]
        return
    assert found == [
        (
            "block-pool.free-queue",
            6,
            -1,
            "the free queue counts 199990 entries but holds 1: a block was linked in twice "
            "or unlinked unseen",
        ),
        (
            "block-pool.leak",
            6,
            12,
            "block 12 has ref_cnt 0 but is neither free nor cached: it can never be "
            "allocated again",
        ),
    ]
    assert sim.pool.num_sweeps == 2  # the first step's, the violation's: found incrementally


@pytest.mark.parametrize("num_speculative_tokens", [0, 3])
def test_sliding_window_groups_are_followed_incrementally(num_speculative_tokens, monkeypatch):
    """Full + sliding-window groups: each request's table is its groups concatenated, named
    rewritten every step, so the check stays in step without a full sweep between the first
    step's and the end's, and agrees with the full sweep every step."""
    if num_speculative_tokens:
        skip_unless_drafts()
    config = dataclasses.replace(
        CFG, num_gpu_blocks=64, kv_groups="full,sliding:20",
        num_speculative_tokens=num_speculative_tokens,
    )  # fmt: skip
    options = SimOptions(seed=3, draft_acceptance=0.5)
    from schedcheck.engines.vllm.v1.snapshot import V1KVSnapshot

    take, named = V1KVSnapshot.take_rewritten_req_ids, []

    def take_and_compare(snapshot):  # every request holding blocks, as the tables name them
        taken = take(snapshot)
        named.append((list(taken) == list(snapshot._hybrid_block_tables()), len(taken)))
        return taken

    monkeypatch.setattr(V1KVSnapshot, "take_rewritten_req_ids", take_and_compare)
    incremental = Simulation(_trace(), "vllm-v1", config, options, profile("unit"))
    result = incremental.run()
    every_step = dataclasses.replace(options, pool_check_interval_steps=1)
    full = run(_trace(), "vllm-v1", config, every_step, profile("unit"))
    assert (result.exit_code, result.finished, result.violations) == (0, 6, [])
    assert result.fingerprint == full.fingerprint and full.violations == []
    assert (incremental.pool.num_sweeps, incremental.pool.num_unconfirmed) == (2, 0)
    assert result.coverage["sliding-window-block-freed"] > 0
    assert all(same for same, _ in named)  # each step named every request holding blocks
    assert sum(n > 1 for _, n in named) > 5  # several at once, often
