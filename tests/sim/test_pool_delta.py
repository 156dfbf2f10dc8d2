"""The incremental block-pool check: a planted error is found at the step it happens, with
200,000 blocks, by the check of the blocks that changed (the full sweep runs only at the
first step, on the violation and at the end)."""

import dataclasses
from pathlib import Path

import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.fuzz.shrink import bundle_run
from schedcheck.sim.loop import SimOptions, Simulation, run
from schedcheck.traces.schema import TraceRequest

NUM_BLOCKS = 200_000
CFG = EngineConfig(
    block_size=16, num_gpu_blocks=NUM_BLOCKS, max_num_batched_tokens=64, max_num_seqs=8
)


def _trace():
    """Six requests, two prompts shared by pairs (prefix hits), tails never block-aligned."""
    shared = tuple(range(100, 148))  # three full blocks
    return [
        TraceRequest(f"r{i}", i * 0.01, 6 + i, prompt_token_ids=shared[: 32 + 8 * (i % 2)]
                     + tuple(range(1000 * i, 1000 * i + 5 + i)))
        for i in range(6)
    ]  # fmt: skip


def _simulate(engine: str):
    sim = Simulation(_trace(), engine, CFG, SimOptions(), profile("unit"))
    return sim, sim.run()


def _found(result):
    return [(v.invariant, v.step, v.block, v.message) for v in result.violations]


def test_the_clean_engine_passes_with_three_sweeps_at_most():
    sim, result = _simulate("planted_pool_engine:make_clean_engine")
    assert (result.exit_code, result.finished, result.violations) == (0, 6, [])
    assert sim.pool.num_sweeps == 2  # the first step (the change log turns on) and the end


@pytest.mark.parametrize(
    ("factory", "invariant", "message"),
    [
        (
            "make_ref_cnt_engine",
            "block-pool.ref-cnt",
            "block {b} has ref_cnt 1 but 0 block tables hold it",
        ),
        (
            "make_lost_engine",
            "block-pool.leak",
            "block {b} has ref_cnt 0 but is neither free nor cached: it can never be "
            "allocated again",
        ),
        (
            "make_free_twice_engine",
            "block-pool.free-queue",
            "block {b} is in the free queue 2 times",
        ),
    ],
)
def test_a_planted_error_is_found_at_its_step(factory, invariant, message):
    sim, result = _simulate(f"planted_pool_engine:{factory}")
    step, block = sim.engine.planted
    assert (step, block) == (5, 2)  # r0 (table [0, 1, 2]) samples its 6th token at step 5
    assert result.exit_code == 1
    assert _found(result) == [(invariant, step, block, message.format(b=block))]
    assert sim.pool.num_sweeps == 2  # the first step's and the violation's: found incrementally


BUNDLES = sorted((Path(__file__).parents[1] / "regressions" / "bundles").iterdir())


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_the_full_sweep_agrees_with_the_incremental_check(bundle):
    """Every regression bundle, with its mutant and clean, run to the end (keep_going):
    the same violations and schedule whether the pool is swept in full every step or
    checked incrementally."""
    parts, requests = bundle_run(bundle)
    for mutant in (parts.config.mutant, None):
        runs = []
        for interval in (1, 0):
            options = dataclasses.replace(
                parts.options, keep_going=True, pool_check_interval_steps=interval
            )
            config = dataclasses.replace(parts.config, mutant=mutant)
            runs.append(run(requests, parts.engine, config, options, parts.cost))
        full, incremental = runs
        assert incremental.fingerprint == full.fingerprint
        assert [v.to_json() for v in incremental.violations] == [
            v.to_json() for v in full.violations
        ]
        assert (mutant is None) or full.violations or full.stuck, "the bundle still fails"
