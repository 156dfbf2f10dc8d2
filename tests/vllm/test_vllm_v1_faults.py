"""The simulator's engine-level fault points on vLLM v1 (engines/vllm/v1/faults.py), through
vLLM's own calls: `preempt` is an RL weight update's `reset_prefix_cache(reset_running_
requests=True)`, `evict` a `reset_prefix_cache()` once nothing runs, each behind the engine
core's pause where a step is in flight or requests run (tox -e vllm-v1).

Block size 4; block 0 is vLLM's null block. Stand-in tokens as in test_vllm_v1.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from vllm_driver import HAS_V1, NEEDS_VLLM_V1, request, run_step, summary

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.deployment import LLAMA3_8B_H100
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces.schema import TraceRequest


def _resets_running_requests() -> bool:
    from vllm.v1.core.sched.scheduler import Scheduler

    from schedcheck.engines.vllm.v1.eras import resets_running_requests

    return resets_running_requests(Scheduler)


pytestmark = [
    *NEEDS_VLLM_V1,
    pytest.mark.skipif(
        HAS_V1 and not _resets_running_requests(),
        reason="reset_prefix_cache(reset_running_requests=...) absent in this release",
    ),
]
PROMPT = tuple(range(10, 20))  # 10 tokens: blocks [10..13][14..17][18 19 . .]


def rng(first: float = 0.64) -> np.random.Generator:
    """A generator whose first random() is `first` rounded (0.64 or 0.26): the preempt fault
    with a step in flight draws its way by it (< 0.5: the reset at once)."""
    seed = {0.64: 0, 0.26: 2}[first]
    out = np.random.default_rng(seed)
    assert round(np.random.default_rng(seed).random(), 2) == first
    return out


def _engine(extra=None, max_num_batched_tokens=8):
    from schedcheck.engines.registry import make_engine

    config = EngineConfig(
        block_size=4, num_gpu_blocks=16, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=4, max_model_len=64, extra=extra or {},
    )  # fmt: skip
    return make_engine("vllm-v1", config)


def test_a_weight_update_reset_preempts_the_running_prefill_and_empties_the_cache():
    """a is 8 tokens into its 10-token prompt when the reset preempts it: the next step
    lists it preempted and schedules it again from 0 (the cache is empty: no hit), in fresh
    blocks; b, waiting, comes after it."""
    engine = _engine()
    engine.add_request(request("a", PROMPT, 2))
    engine.add_request(request("b", range(30, 36), 2))
    first = run_step(engine).output
    assert [summary(r)[:4] + summary(r)[6:] for r in first.scheduled] == [
        ("a", 0, 8, 10, (1, 2), 0)
    ]
    what = engine.inject_fault("preempt", rng())
    assert what == "reset_prefix_cache(reset_running_requests=True): preempted ['a']"
    steps = [run_step(engine) for _ in range(3)]
    assert [
        ([summary(r)[:4] + summary(r)[6:] for r in s.output.scheduled], s.output.preempted_req_ids)
        for s in steps
    ] == [
        ([("a", 0, 8, 10, (3, 4), 0)], ("a",)),  # preempted before the call, scheduled in it
        ([("a", 8, 2, 10, (3, 4, 5), 0), ("b", 0, 6, 6, (6, 7), 0)], ()),
        ([("a", 10, 1, 11, (3, 4, 5), 0), ("b", 6, 1, 7, (6, 7), 0)], ()),
    ]
    assert sorted(f.request_id for f in steps[-1].finished) == ["a", "b"]
    assert engine.inject_fault("evict", rng()) == "reset_prefix_cache(): the prefix cache emptied"


def _pauses() -> bool:
    from vllm.v1.core.sched.scheduler import Scheduler

    from schedcheck.engines.vllm.v1.eras import pause_states

    return pause_states(Scheduler) is not None


NEEDS_PAUSES = pytest.mark.skipif(
    HAS_V1 and not _pauses(), reason="Scheduler.set_pause_state absent in this release"
)


def _steps(engine, num_steps_max=8):
    """Synchronous steps until nothing is unfinished: (scheduled, preempted, finished, the
    pause's mode before the step) of each."""
    out = []
    for _ in range(num_steps_max):  # bounded
        if not engine.has_unfinished_requests():
            return out
        mode = engine._faults.pause_mode
        step = run_step(engine)
        scheduled = [summary(r)[:4] + summary(r)[6:] for r in step.output.scheduled]
        finished = sorted(f.request_id for f in step.finished)
        out.append((scheduled, step.output.preempted_req_ids, finished, mode))
    return out


def _first_chunk_in_flight(draw: float):
    """An async engine with a's first chunk (8 of its 10 tokens) in flight, that chunk's
    output, and what the preempt fault did then (drawn by `draw`)."""
    engine = _engine({"async_scheduling": "true"})
    engine.add_request(request("a", PROMPT, 3))
    first = engine.schedule()
    return engine, first, engine.inject_fault("preempt", rng(draw))


@NEEDS_PAUSES
def test_a_reset_with_a_step_in_flight_waits_for_it_paused():
    """Async scheduling: a's first chunk is in flight when the preempt fault fires, drawn
    to take the engine core's pause "keep": PAUSED_ALL (nothing unfinished, nothing
    scheduled) until the step is applied; then the reset preempts a and the engine
    resumes."""
    engine, first, what = _first_chunk_in_flight(0.64)
    assert what == (
        "pause_scheduler(mode='keep'): PAUSED_ALL until the steps in flight applied, then "
        "the running reset"
    )
    assert not engine.has_unfinished_requests()  # paused, the step still in flight
    assert engine.inject_fault("evict", rng()) is None  # one pause at a time
    assert engine.update_from_output(first, {}) == []
    assert engine.has_unfinished_requests()  # the pause settled: reset, resumed
    assert engine._faults.pause_mode is None
    paths = engine.rare_path_counts()
    assert (paths["engine-paused"], paths["reset-with-step-in-flight"]) == (1, 0)
    again = engine.schedule()
    assert [summary(r)[:4] + summary(r)[6:] for r in again.scheduled] == [
        ("a", 0, 8, 10, (3, 4), 0)  # from 0 in fresh blocks: the cache was emptied
    ]
    assert again.preempted_req_ids == ("a",)


@NEEDS_PAUSES
def test_a_reset_with_a_partial_chunk_in_flight_resumes_in_the_next_step():
    """Async scheduling, a's first chunk (8 of 10 tokens: it samples nothing) in flight,
    the preempt fault drawn the other way: the reset at once, as the engine core's utility
    call between two steps. The next step schedules a again from 0 in fresh blocks while
    the stale chunk's output is still to come; vLLM drops it at its update, and a runs on.
    The chunk sampled nothing: no output names a drop."""
    engine, first, what = _first_chunk_in_flight(0.26)
    assert what == (
        "reset_prefix_cache(reset_running_requests=True): preempted ['a'] with a step in "
        "flight (its output dropped)"
    )
    second = engine.schedule()
    assert [summary(r)[:4] + summary(r)[6:] for r in second.scheduled] == [
        ("a", 0, 8, 10, (3, 4), 0)
    ]
    assert second.preempted_req_ids == ("a",)
    assert engine.update_from_output(first, {}) == []  # the stale chunk: dropped
    third = engine.schedule()
    assert [summary(r)[:4] + summary(r)[6:] for r in third.scheduled] == [
        ("a", 8, 2, 10, (3, 4, 5), 0)
    ]
    assert engine.update_from_output(second, {}) == []
    assert second.dropped_req_ids == third.dropped_req_ids == ()
    assert engine.rare_path_counts()["reset-with-step-in-flight"] == 1


@NEEDS_PAUSES
def test_a_reset_with_a_decode_in_flight_drops_its_token_and_samples_it_again():
    """Async scheduling, a's prompt in one chunk, then its first decode (777 known, the
    token after it sampled by the runner) in flight when the reset comes at once: vLLM
    drops that step's output, so the next output names a in dropped_req_ids (the runner
    forgets its sample) and runs a's 11 known tokens again from 0; the dropped position is
    sampled again in that step."""
    engine = _engine({"async_scheduling": "true"}, max_num_batched_tokens=16)
    engine.add_request(request("a", PROMPT, 3))
    prefill = engine.schedule()
    decode = engine.schedule()  # a placeholder for the prefill's sample
    assert engine.update_from_output(prefill, {"a": 777}) == []
    assert engine.inject_fault("preempt", rng(0.26)).endswith(
        "with a step in flight (its output dropped)"
    )
    again = engine.schedule()
    assert [summary(r)[:4] + summary(r)[5:] for r in again.scheduled] == [
        ("a", 0, 11, 11, [*PROMPT, 777], (3, 4, 5), 0)
    ]
    assert (again.preempted_req_ids, again.dropped_req_ids) == (("a",), ("a",))
    assert engine.update_from_output(decode, {"a": 888}) == []  # dropped by vLLM
    last = engine.schedule()
    assert engine.update_from_output(again, {"a": 888}) == []  # sampled again
    finished = engine.update_from_output(last, {"a": 999})
    assert [(f.request_id, f.output_token_ids) for f in finished] == [("a", (777, 888, 999))]


@NEEDS_PAUSES
def test_evict_while_requests_run_pauses_admission_until_they_drain():
    """The evict fault while a runs takes the pause "wait": PAUSED_NEW, a runs to its end
    and b is not admitted; an empty step reports a finished (vLLM still has it to report),
    then the cache is reset and the engine resumes: b runs in fresh blocks."""
    engine = _engine()
    engine.add_request(request("a", PROMPT, 3))
    engine.add_request(request("b", range(30, 36), 2))
    run_step(engine)
    assert engine.inject_fault("evict", rng()) == (
        "pause_scheduler(mode='wait'): PAUSED_NEW until the running requests drained, then "
        "the cache reset"
    )
    assert _steps(engine) == [
        ([("a", 8, 2, 10, (1, 2, 3), 0)], (), [], "wait"),
        ([("a", 10, 1, 11, (1, 2, 3), 0)], (), [], "wait"),
        ([("a", 11, 1, 12, (1, 2, 3), 0)], (), ["a"], "wait"),
        ([], (), [], "wait"),  # a's finish reported; then the reset and the resume
        ([("b", 0, 6, 6, (4, 5), 0)], (), [], None),
        ([("b", 6, 1, 7, (4, 5), 0)], (), ["b"], None),
    ]
    assert engine.inject_fault("reduced-budget", rng()) is None  # not mapped


def test_a_campaign_scale_run_with_resets_stays_clean_and_reaches_the_rare_path():
    """Four requests sharing a 40-token prefix, a reset before about a third of the steps:
    every request finishes, nothing is violated, and preemptions in the middle of a chunked
    prefill after a prefix hit happen (a path vLLM's memory pressure alone rarely takes)."""
    shared = tuple(range(100, 140))
    requests = [
        TraceRequest(f"r{i}", 0.001 * i, 6, (*shared, *range(1000 * (i + 1), 1000 * (i + 1) + 20)))
        for i in range(4)
    ]
    config = EngineConfig(
        block_size=4, num_gpu_blocks=200, max_num_batched_tokens=16, max_num_seqs=8
    )
    options = SimOptions(faults={"preempt": 0.3}, seed=1)
    result = Simulation(requests, "vllm-v1", config, options, LLAMA3_8B_H100.cost_model()).run()
    assert result.violations == []
    assert result.finished == 4
    resets = [f for f in result.faults_fired if "reset_prefix_cache" in f]
    assert len(resets) == len(result.faults_fired) >= 5
    assert result.coverage["preempt-during-chunked-prefill-with-prefix-hit"] > 0


@NEEDS_PAUSES
def test_async_scheduling_runs_with_resets_and_both_pauses_stay_clean():
    """Async scheduling, eight requests sharing a prefix, preempt and evict before about a
    fifth to a third of the steps: with a step in flight, some resets at once (its output
    dropped, samples included) and the other faults pause; the pauses settle, every
    request finishes with the unchunked outputs and nothing is violated; resets reach the
    middle of chunked prefills after a prefix hit."""
    shared = tuple(range(100, 140))
    requests = [
        TraceRequest(f"r{i}", 0.001 * i, 6, (*shared, *range(1000 * (i + 1), 1000 * (i + 1) + 20)))
        for i in range(8)
    ]
    config = EngineConfig(
        block_size=4, num_gpu_blocks=200, max_num_batched_tokens=16, max_num_seqs=8,
        extra={"async_scheduling": "true"},
    )  # fmt: skip
    options = SimOptions(faults={"preempt": 0.3, "evict": 0.2}, seed=5, record_schedule=True)
    result = Simulation(requests, "vllm-v1", config, options, LLAMA3_8B_H100.cost_model()).run()
    assert result.violations == []
    assert result.finished == 8 and not result.stuck
    fired = result.faults_fired
    counts = [sum(what in f for f in fired) for what in ("'keep'", "'wait'", "in flight")]
    assert counts == [5, 4, 11]  # the pauses "keep" and "wait", the resets at once
    assert sum(len(o.dropped_req_ids) for o in result.schedule) == 5  # samples dropped
    assert result.coverage["preempt-during-chunked-prefill-with-prefix-hit"] > 0
