"""The incremental block-pool check: a planted error is found at the step it happens, with
200,000 blocks, by the check of the blocks that changed (the full sweep runs only at the
first step, on the violation and at the end)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.reference.hashed_manager import HashedKVSnapshot
from schedcheck.fuzz.shrink import bundle_run
from schedcheck.sim.cost_model import profile
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


def _family_trace(seed: int, n: int = 40):
    """n requests from 4 prompt families (prefix hits, same-step duplicates), a few aborted."""
    rng = np.random.default_rng(seed)
    stems = [tuple(int(t) for t in rng.integers(3, 30_000, 40)) for _ in range(4)]
    return [
        TraceRequest(
            f"r{i}",
            round(float(i) * 0.004, 3),
            int(rng.integers(1, 12)),
            prompt_token_ids=stems[i % 4][: int(rng.integers(8, 41))]
            + tuple(int(t) for t in rng.integers(3, 30_000, int(rng.integers(0, 9)))),
            abort_time_s=0.05 if i % 13 == 5 else None,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("block_manager", ["hashed", "radix"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_and_full_agree_under_preemption_eviction_and_aborts(block_manager, seed):
    config = EngineConfig(block_size=4, num_gpu_blocks=48, max_num_batched_tokens=32,
                          max_num_seqs=8, block_manager=block_manager)  # fmt: skip
    faults = {"preempt": 0.1, "abort-mid-chunk": 0.05, "evict": 0.1}
    sims = []
    for interval in (1, 0):
        options = SimOptions(seed=seed, faults=faults, pool_check_interval_steps=interval)
        sim = Simulation(_family_trace(seed), "reference", config, options, profile("unit"))
        sims.append((sim, sim.run()))
    (_, full), (incremental_sim, incremental) = sims
    assert full.exit_code == 0 and full.finished + full.aborted == 40
    assert incremental.fingerprint == full.fingerprint
    assert incremental.violations == full.violations == []
    assert incremental.faults_fired == full.faults_fired and len(full.faults_fired) > 5
    assert (incremental_sim.pool.num_sweeps, incremental_sim.pool.num_unconfirmed) == (2, 0)


@pytest.mark.parametrize(("seed", "sweep_every"), [(0, 0), (1, 0), (2, 0), (3, 7)])
def test_preemptions_evictions_and_aborts_read_the_same_walked(seed, sweep_every, monkeypatch):
    """A faulty run's every step goes through the walk and reads hashes as words (the
    hashed manager's snapshot), and reads as the generic path does: schedule, findings,
    sweeps; also with a full sweep every 7th step between them (the sweep's dict of
    checked hashes rebuilt from the words)."""
    config = EngineConfig(block_size=4, num_gpu_blocks=48, max_num_batched_tokens=32,
                          max_num_seqs=8, block_manager="hashed")  # fmt: skip
    faults = {"preempt": 0.1, "abort-mid-chunk": 0.05, "evict": 0.1}
    options = SimOptions(seed=seed, faults=faults, pool_check_interval_steps=sweep_every)
    walks = []
    pool_arrays = HashedKVSnapshot.pool_arrays
    monkeypatch.setattr(
        HashedKVSnapshot, "pool_arrays", lambda self: walks.append(1) or pool_arrays(self)
    )
    sims = []
    for walked in (True, False):
        with monkeypatch.context() as m:
            if not walked:
                m.delattr(HashedKVSnapshot, "pool_arrays")
                m.delattr(HashedKVSnapshot, "hash_words")
            sim = Simulation(_family_trace(seed), "reference", config, options, profile("unit"))
            sims.append((sim, sim.run()))
    (walked_sim, walked_run), (generic_sim, generic_run) = sims
    assert walked_run.fingerprint == generic_run.fingerprint
    assert walked_run.violations == generic_run.violations
    assert walked_run.violations == [] and len(walked_run.faults_fired) > 5
    num_sweeps = walked_sim.pool.num_sweeps  # the first step's, the interval's, the end's
    assert len(walks) == walked_run.steps - (num_sweeps - 1)  # every step not swept
    assert (num_sweeps == 2) if sweep_every == 0 else (num_sweeps > 5)  # sweeps between walks
    pools = [(s.pool.num_sweeps, s.pool.num_unconfirmed) for s in (walked_sim, generic_sim)]
    assert pools == [(num_sweeps, 0), (num_sweeps, 0)]


def test_the_radix_manager_names_the_tables_it_rewrites_in_place(monkeypatch):
    """Two equal prompts prefilled in lockstep (6 tokens a step each): r1 inserts each page
    first, so r2 switches its copies, in place, to the tree's pages (sglang#1858), e.g. after
    step 1 its table [0, 3, 5] becomes [0, 1, 4]. The manager names r2 each time and the
    check compares r2's table whole: no full sweep is needed to stay in step."""
    from schedcheck.engines.reference.radix_manager import RadixKVSnapshot

    taken: list[list[str]] = []
    take = RadixKVSnapshot.take_rewritten_req_ids
    monkeypatch.setattr(
        RadixKVSnapshot, "take_rewritten_req_ids", lambda s: taken.append(sorted(take(s))) or []
    )
    prompt = tuple(range(100, 125))  # 6 full pages + 1 token
    trace = [TraceRequest(f"r{i}", 0.0, 3, prompt_token_ids=prompt) for i in (1, 2)]
    config = EngineConfig(block_size=4, num_gpu_blocks=NUM_BLOCKS, block_manager="radix",
                          max_num_batched_tokens=12, long_prefill_token_threshold=6)  # fmt: skip
    sim = Simulation(trace, "reference", config, SimOptions(), profile("unit"))
    result = sim.run()
    assert (result.exit_code, result.finished) == (0, 2)
    assert taken[:6] == [[], ["r2"], ["r2"], ["r2"], [], []]  # the log is off before step 0
    assert (sim.pool.num_sweeps, sim.pool.num_unconfirmed) == (2, 0)
