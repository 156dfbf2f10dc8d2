"""vLLM 0.34.0's resumable streaming-input sessions behind the vllm-v1 adapter
(engines/vllm/v1/sessions.py; tox -e vllm-v1): a later turn continues its parent's session
through vLLM's own add_request, with the KV kept between turns, and every check holds.

Block size 4; block 0 is vLLM's null block. Each trace runs with streaming_input on and
off: the tokens are a function of the prompts (the hash model), so the outputs agree.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from vllm_driver import NEEDS_VLLM_V1, needs_release

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces.schema import TraceRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from conversation import CONVERSATION, STEP_COST

pytestmark = [*NEEDS_VLLM_V1, needs_release("0.34.0", "resumable streaming-input sessions")]


def run(
    trace,
    streaming: bool | str,
    async_scheduling: bool = False,
    num_gpu_blocks: int = 40,
    faults=None,
    counts: tuple[str, ...] = ("session-resumed",),
):
    """The run's result, and the adapter's counts of `counts` (one: the count alone)."""
    mode = streaming if isinstance(streaming, str) else "true" if streaming else "false"
    extra = {"streaming_input": mode}
    if async_scheduling:
        extra["async_scheduling"] = "true"
    config = EngineConfig(
        block_size=4,
        num_gpu_blocks=num_gpu_blocks,
        max_num_batched_tokens=32,
        max_num_seqs=4,
        max_model_len=32,
        extra=extra,
    )
    options = SimOptions(faults=faults or {}, seed=0)
    sim = Simulation(list(trace), "vllm-v1", config, options, STEP_COST)
    result = sim.run()
    paths = dict(sim.engine.rare_path_counts())
    found = tuple(paths.get(name) for name in counts)
    return result, found[0] if len(found) == 1 else found


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_later_turns_continue_their_parents_session_and_every_check_holds(async_scheduling):
    on, resumed = run(CONVERSATION, True, async_scheduling)
    off, not_resumed = run(CONVERSATION, False, async_scheduling)
    assert (on.violations, on.stuck, off.violations, off.stuck) == ([], {}, [], {})
    assert (resumed, not_resumed) == (2, None)  # r1 continued r0's session, r2 r1's
    assert dict(on.outputs) == dict(off.outputs)
    assert [len(on.outputs[r]) for r in ("r0", "r1", "r2", "r3")] == [3, 2, 2, 4]


def test_a_session_kept_while_its_later_turn_thinks_is_no_leak_of_the_idle_engine():
    """r1 arrives 0.5 s after r0 finished: the engine goes idle with r0's session holding
    its blocks (held_between_turns), which the idle check does not count as a leak."""
    trace = (
        TraceRequest("r0", 0.0, 2, prompt_token_ids=tuple(range(100, 110))),
        TraceRequest(
            "r1", 0.0, 2, prompt_token_ids=(300,), parent_request_id="r0", think_time_s=0.5
        ),
    )
    result, resumed = run(trace, True)
    assert (result.violations, result.stuck, resumed) == ([], {}, 1)


def test_a_turn_no_later_turn_waits_for_is_closed_and_frees_its_blocks():
    """r1 arrives after r0 finished (no turn waited): r0's session was closed at its stop
    (a non-resumable request ends the stream) and r1 is a request of its own."""
    trace = (
        TraceRequest("r0", 0.0, 1, prompt_token_ids=tuple(range(100, 110))),
        TraceRequest("r1", 1.0, 1, prompt_token_ids=(300,), parent_request_id="r0"),
    )
    result, resumed = run(trace, True)
    assert (result.violations, result.stuck, resumed) == ([], {}, 0)


def test_a_later_turn_of_another_cache_salt_is_a_request_of_its_own():
    """A session keeps its first request's cache_salt (a streaming update carries none),
    so a later turn salted otherwise cannot continue it: the session is closed and the
    turn added anew (its KV is not its parent's). Found as a harness false positive by
    the first `--family streaming` campaign (shadow-kv.read, 2 requests)."""
    trace = (
        TraceRequest("r5", 0.0, 1, prompt_token_ids=(6000,), cache_salt="a"),
        TraceRequest("r6", 0.0, 1, prompt_token_ids=(7000,), parent_request_id="r5"),
    )
    result, resumed = run(trace, True)
    assert (result.violations, result.stuck, resumed) == ([], {}, 0)


def test_two_sessions_that_fill_the_pool_deadlock_vllm_a_liveness_finding():
    """vLLM 0.34.0's known deadlock (tests/vllm/repro/streaming_sessions_deadlock_under_kv_
    pressure.py; upstream PR #49439): a and b hold 4 blocks each of the 8, their next turns
    need a 5th each, and nothing runs to be preempted. The same trace without sessions
    recomputes the turns and is clean."""
    trace = (
        TraceRequest("a", 0.0, 1, prompt_token_ids=tuple(range(100, 114))),
        TraceRequest("b", 0.0, 1, prompt_token_ids=tuple(range(200, 214))),
        TraceRequest("a2", 0.0, 1, prompt_token_ids=(300, 301, 302), parent_request_id="a"),
        TraceRequest("b2", 0.0, 1, prompt_token_ids=(400, 401, 402), parent_request_id="b"),
    )
    stuck, resumed = run(trace, True, num_gpu_blocks=9)
    assert resumed == 2 and stuck.violations == []
    assert stuck.stuck == {
        "a2": "WAITING: 0 running, 0 free blocks",
        "b2": "WAITING: 0 running, 0 free blocks",
        "*": "the engine schedules nothing while requests wait",
    }
    clean, _ = run(trace, False, num_gpu_blocks=9)
    assert (clean.violations, clean.stuck) == ([], {})


def test_a_weight_updates_cache_reset_with_a_session_kept_crashes_vllm():
    """vLLM 0.34.0 (tests/vllm/repro/streaming_session_breaks_running_reset.py): the fault
    point's reset of the running requests (an RL weight update's clear_cache) raises while
    r0's session waits for r1, r2 running: an engine-crash, vLLM's own frame."""
    trace = (
        TraceRequest("r0", 0.0, 1, prompt_token_ids=tuple(range(100, 106))),
        TraceRequest(
            "r1", 0.0, 1, prompt_token_ids=(300,), parent_request_id="r0", think_time_s=0.05
        ),
        TraceRequest("r2", 0.0, 20, prompt_token_ids=tuple(range(200, 206))),
    )
    result, _ = run(trace, True, faults={"preempt": 0.5})
    assert [(v.invariant, v.case) for v in result.violations] == [
        ("engine-crash", "RuntimeError at vllm/v1/core/sched/scheduler.py:reset_prefix_cache:3348")
    ]


def test_a_session_grown_past_max_model_len_runs_past_the_runners_table():
    """vllm#42489 (fix: PR #42502, open): vLLM's frontend checks a session's chunk alone
    (11 tokens here, max_model_len 32 is not the limit: 16 is), so the session grows to 23
    tokens and vLLM schedules its positions past max_model_len with 4 blocks. The adapter
    checks the chunk as the frontend does; the turn sent whole would be refused."""
    trace = (
        TraceRequest("r0", 0.0, 3, prompt_token_ids=tuple(range(100, 110))),
        TraceRequest("r1", 0.0, 3, prompt_token_ids=tuple(range(200, 210)), parent_request_id="r0"),
    )
    config = EngineConfig(
        block_size=4,
        num_gpu_blocks=64,
        max_num_batched_tokens=64,
        max_num_seqs=4,
        max_model_len=16,
        extra={"streaming_input": "true"},
    )
    result = Simulation(list(trace), "vllm-v1", config, SimOptions(), STEP_COST).run()
    found = [(v.invariant, v.request_id, v.found) for v in result.violations[:2]]
    assert found[0][0] == "accounting.block-table-short"  # 4 blocks for 23 tokens
    assert found[1] == ("accounting.max-model-len", "r1", "23")  # positions up to 22
    closed = dataclasses.replace(config, extra={"streaming_input": "false"})
    alone = Simulation(list(trace), "vllm-v1", closed, SimOptions(), STEP_COST).run()
    assert (alone.violations, alone.rejected) == ([], 1)  # r1 whole: refused by the frontend


QUEUED = ("session-resumed", "session-chunk-queued")


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_a_later_turn_sent_while_its_parent_runs_is_queued_and_continues_at_its_stop(
    async_scheduling,
):
    """r1 arrives while r0 runs, r2 while r1 waits for r0: each input is sent as it can be
    (r2's as r1 starts), vLLM queues it in the session's streaming_queue and continues the
    session inside the update where the turn stops; every check holds."""
    queued, (resumed, num_queued) = run(CONVERSATION, "queued", async_scheduling, counts=QUEUED)
    after_stop, _ = run(CONVERSATION, True, async_scheduling)
    assert (queued.violations, queued.stuck, resumed, num_queued) == ([], {}, 2, 2)
    assert [len(queued.outputs[r]) for r in ("r0", "r1", "r2", "r3")] == [3, 2, 2, 4]
    for rid in ("r0", "r3"):  # the same prompts
        assert queued.outputs[rid] == after_stop.outputs[rid]
    # r1's history is what vLLM kept: r0's outputs without the last sampled one; the hash
    # model's tokens are a function of the prompt, so r1 run alone on it samples the same
    r0 = queued.outputs["r0"]
    alone_prompt = (*range(100, 110), *r0[:-1], 300, 301, 302)
    alone, _ = run((TraceRequest("r1", 0.0, 2, prompt_token_ids=alone_prompt),), False)
    assert alone.outputs["r1"] == queued.outputs["r1"]


def test_a_chunk_queued_in_a_session_that_is_aborted_goes_with_it():
    """r0 is aborted with r1's input queued: vLLM ends the session (the chunk with it), and
    r1 runs as a request of its own on the history the client had sent."""
    trace = (
        TraceRequest("r0", 0.0, 8, prompt_token_ids=tuple(range(100, 110)), abort_time_s=0.0035),
        TraceRequest("r1", 0.001, 2, prompt_token_ids=(300, 301), parent_request_id="r0"),
    )
    result, (resumed, num_queued) = run(trace, "queued", counts=QUEUED)
    assert (result.violations, result.stuck, resumed, num_queued) == ([], {}, 0, 1)
    assert result.aborted == 1 and len(result.outputs["r1"]) == 2


def test_a_chunk_of_another_cache_salt_is_not_queued():
    trace = (
        TraceRequest("r5", 0.0, 3, prompt_token_ids=(6000, 6001), cache_salt="a"),
        TraceRequest("r6", 0.001, 1, prompt_token_ids=(7000,), parent_request_id="r5"),
    )
    result, (resumed, num_queued) = run(trace, "queued", counts=QUEUED)
    assert (result.violations, result.stuck, resumed, num_queued) == ([], {}, 0, 0)
