"""The engine loop with the toy engine: clean runs, each fault caught, liveness, arrivals."""

import dataclasses
import re

import numpy as np

from schedcheck.engines.protocol import EngineConfig
from schedcheck.invariants import hash_model
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, Simulation, run
from schedcheck.traces.schema import TraceRequest

CFG = EngineConfig(block_size=4, num_gpu_blocks=200, max_num_batched_tokens=32, max_num_seqs=8)
UNIT = profile("unit")  # 10 ms per step


def _trace(n=20, output_length=5):
    return [
        TraceRequest(f"r{i}", i * 0.01, output_length, prompt_token_ids=tuple(range(3, 40 + i)))
        for i in range(n)
    ]


def test_clean_toy_run_finishes_everything_with_unchunked_outputs():
    res = run(_trace(), "toy_engine:make_engine", CFG, SimOptions(record_schedule=True), UNIT)
    assert (res.exit_code, res.finished, res.requests, res.steps) == (0, 20, 20, 36)
    assert abs(res.sim_time_s - 36 * 0.01) < 1e-9
    prompt = np.arange(3, 40, dtype=np.int64)
    assert res.outputs["r0"] == hash_model.unchunked_outputs(prompt, 5).tolist()
    assert len(res.schedule) == res.steps


def test_swapped_blocks_are_a_read_violation_at_the_first_swapped_key():
    res = run(_trace(), "toy_engine:make_swap_engine", CFG, SimOptions(), UNIT)
    assert res.exit_code == 1
    v = res.violations[0]
    assert (v.invariant, v.step, v.request_id, v.position) == ("shadow-kv.read", 2, "r0", 0)
    assert v.context[0].startswith("step 1: num_computed_tokens 0 + num_scheduled_tokens 32")


def test_a_stale_decode_token_is_a_chunk_token_violation():
    res = run(_trace(), "toy_engine:make_stale_token_engine", CFG, SimOptions(), UNIT)
    v = res.violations[0]
    assert (res.exit_code, v.invariant, v.request_id, v.position) == (
        1,
        "accounting.chunk-tokens",
        "r0",
        38,
    )


def test_a_request_that_never_fits_is_a_liveness_failure():
    small = EngineConfig(block_size=4, num_gpu_blocks=5, max_num_batched_tokens=32)
    res = run(_trace(2), "toy_engine:make_engine", small, SimOptions(), UNIT)
    assert res.exit_code == 3
    assert res.stuck["r0"] == "no free blocks"


def test_abort_mid_prefill_frees_the_request():
    trace = [TraceRequest("a", 0.0, 4, prompt_token_ids=tuple(range(3, 103)), abort_time_s=0.015)]
    res = run(trace, "toy_engine:make_engine", CFG, SimOptions(), UNIT)
    assert (res.exit_code, res.aborted, res.finished, res.steps) == (0, 1, 0, 2)


def test_a_later_turn_carries_its_parents_prompt_and_outputs():
    trace = [
        TraceRequest("t0", 0.0, 3, prompt_token_ids=(5, 6, 7, 8, 9), session_id="s"),
        TraceRequest(
            "t1",
            0.0,
            2,
            prompt_token_ids=(11, 12),
            session_id="s",
            parent_request_id="t0",
            think_time_s=1.0,
        ),
    ]
    res = run(trace, "toy_engine:make_engine", CFG, SimOptions(record_schedule=True), UNIT)
    assert res.exit_code == 0
    first_t1 = next(r for out in res.schedule for r in out.scheduled if r.request_id == "t1")
    assert first_t1.token_ids.tolist() == [5, 6, 7, 8, 9, *res.outputs["t0"], 11, 12]
    # t0 runs 3 steps (prefill + 2 decodes); t1 is released 1.0 s later, then runs 2 steps
    assert res.steps == 5
    assert abs(res.sim_time_s - (0.03 + 1.0 + 0.02)) < 1e-9


def test_same_run_same_fingerprint():
    a = run(_trace(), "toy_engine:make_engine", CFG, SimOptions(), UNIT)
    b = run(_trace(), "toy_engine:make_engine", CFG, SimOptions(), UNIT)
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64


def test_bare_hash_executor_gives_the_same_schedule_as_the_checked_run():
    checked = run(_trace(), "reference", CFG, SimOptions(), UNIT)
    bare = run(
        _trace(), "reference", CFG, SimOptions(executor="hash", check_invariants=False), UNIT
    )
    assert checked.exit_code == 0
    assert (bare.fingerprint, bare.outputs) == (checked.fingerprint, checked.outputs)


def test_a_stall_while_a_later_turn_waits_is_a_liveness_failure_not_a_harness_crash():
    small = EngineConfig(block_size=4, num_gpu_blocks=5, max_num_batched_tokens=32)
    trace = [
        TraceRequest("t0", 0.0, 2, prompt_token_ids=tuple(range(3, 40)), session_id="s"),
        TraceRequest("t1", 0.0, 2, prompt_token_ids=(5, 6), session_id="s", think_time_s=1.0),
    ]
    res = run(trace, "toy_engine:make_engine", small, SimOptions(), UNIT)
    assert res.exit_code == 3 and res.stuck["t0"] == "no free blocks"


def test_an_ignored_invariant_is_counted_not_reported():
    options = SimOptions(ignore=("shadow-kv.read",))
    res = run(_trace(), "toy_engine:make_swap_engine", CFG, options, UNIT)
    assert "shadow-kv.read" not in {v.invariant for v in res.violations}
    assert res.ignored["shadow-kv.read"] >= 1


class _Crashing:
    """The toy engine, raising from schedule() at its third step."""

    def __init__(self, config):
        from toy_engine import make_engine

        self.inner = make_engine(config)
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def schedule(self):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("boom")
        return self.inner.schedule()


def test_an_engine_crash_is_a_violation_unless_ignored():
    crashed = run(_trace(), f"{__name__}:_Crashing", CFG, SimOptions(), UNIT)
    assert [v.invariant for v in crashed.violations] == ["engine-crash"]
    assert "RuntimeError: boom" in crashed.violations[0].message
    ignored = run(
        _trace(), f"{__name__}:_Crashing", CFG, SimOptions(ignore=("engine-crash",)), UNIT
    )
    assert (ignored.violations, ignored.ignored, ignored.steps) == ([], {"engine-crash": 1}, 2)


class _CrashingWhenAsked(_Crashing):
    """The toy engine, raising from has_unfinished_requests() at its third call (as vLLM
    0.34.0 does where the adapter settles a pause: its cache reset with a session kept)."""

    def schedule(self):
        return self.inner.schedule()

    def has_unfinished_requests(self):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("boom")
        return self.inner.has_unfinished_requests()


def test_a_raise_from_has_unfinished_requests_is_blamed_as_inside_any_engine_call():
    crashed = run(_trace(), f"{__name__}:_CrashingWhenAsked", CFG, SimOptions(), UNIT)
    assert [(v.invariant, v.message) for v in crashed.violations] == [
        ("engine-crash", "has_unfinished_requests: RuntimeError: boom")
    ]


def test_the_liveness_bound_counts_a_threshold_limited_prefill_by_its_threshold():
    """1,500 prompt tokens at 1 token a step (long_prefill_token_threshold 1, budget 64) take
    1,500 steps; a bound counted in budgets (2 * 25 + 1,002 = 1,052) cut it off: a false
    liveness failure the clean-engine campaign (seed 7) found with block_size 1."""
    prompt = tuple(range(3, 1503))
    config = EngineConfig(block_size=4, num_gpu_blocks=400, max_num_batched_tokens=64,
                          long_prefill_token_threshold=1)  # fmt: skip
    result = run([TraceRequest("a", 0.0, 1, prompt_token_ids=prompt)], "reference", config,
                 SimOptions(), profile("unit"))  # fmt: skip
    assert (result.exit_code, result.stuck, result.finished, result.steps) == (0, {}, 1, 1500)


def test_the_loop_numbers_steps_as_the_engine_does_empty_ones_included():
    """Under async scheduling a step may schedule nothing (the last tokens of its requests
    are in flight); such a step is not recorded, so the fingerprint's step count falls
    behind. The loop counts every step it schedules itself: a fault's "step N" is the step
    the engine numbers N, whose output lists the request the fault preempted. (Counted in
    recorded steps, 39 of these 47 messages named an earlier step, over seeds 0..9.)"""
    config = dataclasses.replace(CFG, extra={"async_scheduling": "true"})
    trace = [
        TraceRequest(f"r{i}", i * 0.1, 3, prompt_token_ids=tuple(range(3, 40 + i)))
        for i in range(8)
    ]
    options = SimOptions(seed=0, faults={"preempt": 0.3}, record_schedule=True)
    sim = Simulation(trace, "reference", config, options, UNIT)
    res = sim.run()
    steps = [output.step for output in res.schedule]
    assert (res.exit_code, len(steps), sim.step_index) == (0, 28, 36)  # 8 steps ran nothing
    assert steps != list(range(28))
    by_step = {output.step: output for output in res.schedule}
    preempts = [re.fullmatch(r"step (\d+): preempt: preempted (r\d)", m) for m in res.faults_fired]
    assert len(preempts) == 3 and all(p is not None for p in preempts)
    assert all(p[2] in by_step[int(p[1])].preempted_req_ids for p in preempts if p)
