"""Fault points fire per seed, reproducibly; coverage counts the rare paths it saw."""

import numpy as np
import pytest

from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    ScheduledRequest,
    SchedulerOutput,
)
from schedcheck.sim.cost_model import profile
from schedcheck.sim.coverage import Coverage, never_reached
from schedcheck.sim.faults import draw_faults
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

CFG = EngineConfig(block_size=4, num_gpu_blocks=200, max_num_batched_tokens=16, max_num_seqs=8)


def _trace():
    return [TraceRequest(f"r{i}", 0.0, 3, prompt_token_ids=tuple(range(3, 60))) for i in range(4)]


def test_draws_are_in_fixed_order_and_seeded():
    faults = {"reduced-budget": 0.5, "preempt": 0.5}
    a = [draw_faults(faults, g) for g in [np.random.default_rng(7)] for _ in range(5)]
    b = [draw_faults(faults, g) for g in [np.random.default_rng(7)] for _ in range(5)]
    assert a == b
    assert all(kinds == sorted(kinds, key=["preempt", "reduced-budget"].index) for kinds in a)


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown fault 'crash'"):
        SimOptions(faults={"crash": 0.1})


def test_abort_mid_chunk_fault_aborts_a_request_between_chunks():
    opts = SimOptions(seed=3, faults={"abort-mid-chunk": 1.0})
    res = run(_trace(), "toy_engine:make_engine", CFG, opts, profile("unit"))
    assert res.exit_code == 0
    assert res.aborted == 4 and res.coverage["abort-mid-chunk"] == 4
    assert res.faults_fired[0] == "step 1: abort-mid-chunk: aborted r0"
    again = run(_trace(), "toy_engine:make_engine", CFG, opts, profile("unit"))
    assert again.faults_fired == res.faults_fired and again.fingerprint == res.fingerprint


def _req(rid, ncomp, nsched, ntok, cached=0):
    return ScheduledRequest(
        rid,
        ncomp,
        nsched,
        ntok,
        ntok,
        np.zeros(nsched, np.int64),
        (0,) * 4,
        num_cached_tokens=cached,
    )


def test_coverage_of_same_prefix_and_fully_cached_prompt():
    cov = Coverage(block_size=4)
    prompt = np.arange(3, 12, dtype=np.int64)  # 9 tokens: 2 full blocks
    live = {rid: EngineRequest(rid, prompt, 1) for rid in ("a", "b", "c")}
    cov.observe_step(SchedulerOutput(1, (_req("a", 0, 9, 9), _req("b", 0, 4, 9))), live)
    assert cov.counts["same-prefix-same-step"] == 1
    cov.observe_step(SchedulerOutput(2, (_req("c", 8, 1, 9, cached=8),)), live)
    assert cov.counts["fully-cached-prompt"] == 1
    assert "abort-mid-chunk" in never_reached(cov.counts)
    cov.observe_abort("b")  # b's first chunk stopped at 4 of 9 tokens
    assert cov.counts["abort-mid-chunk"] == 1


def test_coverage_of_drafts_that_cross_into_a_new_block():
    """block_size 4, 2 drafts: free slots of the last block after 3 tokens 1 (but that chunk
    does not sample: no drafts), after 9 tokens 3, after 10 tokens 2, after 11 tokens 1."""
    cov = Coverage(block_size=4, num_lookahead_tokens=2)
    live = {"a": EngineRequest("a", np.arange(3, 12, dtype=np.int64), 4)}
    for step, (ncomp, nsched, ntok) in enumerate([(0, 3, 9), (3, 6, 9), (9, 1, 10)]):
        cov.observe_step(SchedulerOutput(step, (_req("a", ncomp, nsched, ntok),)), live)
    assert cov.counts["drafts-cross-block"] == 0
    cov.observe_step(SchedulerOutput(3, (_req("a", 10, 1, 11),)), live)
    assert cov.counts["drafts-cross-block"] == 1
    assert Coverage(block_size=4).num_lookahead_tokens == 0
    assert "drafts-cross-block" in never_reached({})
    assert "drafts-cross-block" not in never_reached({}, drafts=False)


def test_never_reached_lists_only_what_the_engine_can_reach_and_the_harness_can_count():
    """abort-mid-chunk for an engine that declares aborts only; evict-cached-block only where
    the engine's snapshot counts evictions (else it is unmeasured, not unreached)."""
    every = never_reached({})
    assert "abort-mid-chunk" in every and "evict-cached-block" in every
    assert "abort-mid-chunk" not in never_reached({}, aborts=False)
    assert "evict-cached-block" not in never_reached({}, evictions_counted=False)


def test_faults_stop_once_the_arrivals_stay_idle_for_the_window():
    """The fault window closes FAULT_STEPS_AFTER_ARRIVALS steps after the arrivals went
    idle (only a finish can release more) and stayed so, for good: faults that starve the
    parent a later turn waits for would otherwise keep the liveness phase from coming. An
    arrival in between (a later turn released) starts the count again."""
    from types import SimpleNamespace

    from schedcheck.sim.liveness import FAULT_STEPS_AFTER_ARRIVALS, Liveness

    arrivals = SimpleNamespace(idle=False)
    ledger = SimpleNamespace(live={})  # nothing live: the bound is its margin
    live = Liveness(CFG, SimOptions(faults={"preempt": 1.0}), ledger, arrivals, dict, None)
    assert [live.faults_on(step) for step in range(3)] == [True] * 3
    arrivals.idle = True  # step 3: only a finish can bring the next arrival
    assert all(live.faults_on(step) for step in range(3, 3 + FAULT_STEPS_AFTER_ARRIVALS - 10))
    arrivals.idle = False  # a later turn released: the count starts again once idle
    assert live.faults_on(60)
    arrivals.idle = True
    window = [live.faults_on(step) for step in range(61, 61 + FAULT_STEPS_AFTER_ARRIVALS + 1)]
    assert window == [True] * FAULT_STEPS_AFTER_ARRIVALS + [False]
    arrivals.idle = False
    assert not live.faults_on(500) and live.faults_over  # closed for good
    live.start(500)
    assert live.deadline_step == 500 + 1000  # the liveness phase starts once they are over
