"""SGLang 0.5.23's streaming sessions behind the sglang adapter (engines/sglang/sessions.py;
tox -e sglang): a later turn continues its parent's session through SGLang's own
Session.create_req, borrowing the session's KV record, and every check holds; the KV a
session holds between turns is SGLang's own, not a leak.

Each trace runs with sessions on and off: the tokens are a function of the prompts (the
hash model), so the outputs agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sglang_driver import SGLANG_0_5_23

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces.schema import TraceRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from conversation import CONVERSATION, STEP_COST

pytestmark = SGLANG_0_5_23


SCENARIOS = Path(__file__).parent / "scenarios"


def run_with(trace, **changes):
    """The run's result with sessions on, page 1, `changes` to the config."""
    extra = {"streaming_session": "true", **changes.pop("extra", {})}
    fields = dict(block_size=1, num_gpu_blocks=256, max_num_batched_tokens=32, max_num_seqs=4,
                  max_model_len=64, block_manager="radix")  # fmt: skip
    config = EngineConfig(**{**fields, **changes}, extra=extra)
    return Simulation(list(trace), "sglang", config, SimOptions(seed=0), STEP_COST).run()


def run(trace, sessions: bool, page_size: int = 1, overlap: bool = False):
    """The run's result, its count of continued sessions, and the sessions left open."""
    extra = {"streaming_session": "true" if sessions else "false"}
    extra["async_scheduling"] = "true" if overlap else "false"
    config = EngineConfig(
        block_size=page_size,
        num_gpu_blocks=256 // page_size,
        max_num_batched_tokens=32,
        max_num_seqs=4,
        max_model_len=64,
        block_manager="radix",
        extra=extra,
    )
    sim = Simulation(list(trace), "sglang", config, SimOptions(seed=0), STEP_COST)
    result = sim.run()
    scheduler = sim.engine.scheduler
    return (
        result,
        sim.engine.rare_path_counts().get("session-resumed"),
        sorted(scheduler.session_controller.sessions),
    )


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("overlap", [False, True], ids=["normal", "overlap"])
def test_later_turns_continue_their_parents_session_and_every_check_holds(page_size, overlap):
    on, resumed, left = run(CONVERSATION, True, page_size, overlap)
    off, not_resumed, _ = run(CONVERSATION, False, page_size, overlap)
    assert (on.violations, on.stuck, off.violations, off.stuck) == ([], {}, [], {})
    assert (resumed, not_resumed, left) == (2, None, [])  # r1 continued r0's, r2 r1's
    assert dict(on.outputs) == dict(off.outputs)
    assert [len(on.outputs[r]) for r in ("r0", "r1", "r2", "r3")] == [3, 2, 2, 4]


def test_a_session_kept_while_its_later_turn_thinks_is_no_leak_of_the_idle_engine():
    """r1 arrives 0.5 s after r0 finished: the engine goes idle with r0's session holding
    its KV, which the pool check and SGLang's idle statement count as the session's."""
    trace = (
        TraceRequest("r0", 0.0, 2, prompt_token_ids=tuple(range(100, 110))),
        TraceRequest(
            "r1", 0.0, 2, prompt_token_ids=(300,), parent_request_id="r0", think_time_s=0.5
        ),
    )
    result, resumed, left = run(trace, True)
    assert (result.violations, result.stuck, resumed, left) == ([], {}, 1, [])


def test_a_turn_no_later_turn_waits_for_closes_its_session():
    trace = (
        TraceRequest("r0", 0.0, 1, prompt_token_ids=tuple(range(100, 110))),
        TraceRequest("r1", 1.0, 1, prompt_token_ids=(300,), parent_request_id="r0"),
    )
    result, resumed, left = run(trace, True)
    assert (result.violations, result.stuck, resumed, left) == ([], {}, 0, [])


def test_a_later_turn_of_another_cache_salt_opens_its_own_session():
    """A session's KV keeps its first turn's salt: a later turn salted otherwise would
    read it as its own (the shadow KV's finding), so its parent's session is closed."""
    trace = (
        TraceRequest("r5", 0.0, 1, prompt_token_ids=(6000, 6001), cache_salt="a"),
        TraceRequest("r6", 0.0, 1, prompt_token_ids=(7000,), parent_request_id="r5"),
    )
    result, resumed, left = run(trace, True)
    assert (result.violations, result.stuck, resumed, left) == ([], {}, 0, [])


def test_an_aborted_turns_session_is_closed_and_its_later_turn_opens_its_own():
    trace = (
        TraceRequest("r0", 0.0, 8, prompt_token_ids=tuple(range(100, 110)), abort_time_s=0.0035),
        TraceRequest("r1", 0.001, 2, prompt_token_ids=(300, 301), parent_request_id="r0"),
    )
    result, resumed, left = run(trace, True)
    assert (result.violations, result.stuck, resumed, left) == ([], {}, 0, [])
    assert result.aborted == 1 and len(result.outputs["r1"]) == 2


def test_dfs_weight_crashes_on_a_streaming_sessions_later_turn_s1():
    """SGLang's bug S1 (tests/sglang/repro/s1_dfs_weight_crashes_on_a_streaming_sessions_
    later_turn.py): r1, waiting to continue r0's session, matched the session's stand-in
    node (`_VirtualNode`), which dfs-weight hands to the tree's dfs_weight_order. lpm
    schedules the same trace clean."""
    config = dict(extra={"schedule_policy": "dfs-weight"})
    crashed = run_with(CONVERSATION, **config)
    assert [(v.invariant, v.case) for v in crashed.violations] == [
        (
            "engine-crash",
            "TypeError at sglang/srt/mem_cache/rust_tree_core/adapter.py:dfs_weight_order:1115",
        )
    ]
    assert run_with(CONVERSATION, extra={"schedule_policy": "lpm"}).violations == []


# shrunk by the first `fuzz --engine sglang --family streaming` campaign (seed 51): each an
# engine crash with streaming sessions on, clean with them off (tests/sglang/scenarios/)
SESSION_CRASHES = {
    # a turn retracted (the preempt fault's SGLANG_TEST_RETRACT) waits with the session's
    # stand-in node as its last_node: S1 again, without a later turn
    "session-retracted-under-dfs-weight": (
        "TypeError at sglang/srt/mem_cache/rust_tree_core/adapter.py:dfs_weight_order:1115"
    ),
    # overlap on, a one-token turn retracted before its first output: re-admitted, its
    # match key is empty, so the record it borrows is cut to no KV with its row still
    # registered, which ReqToTokenPool.alloc refuses
    "session-retracted-with-overlap-reused-row-without-kv": (
        "AssertionError at sglang/srt/mem_cache/memory_pool.py:alloc:423"
    ),
    # radix cache off, ignore_eos, chunked prefill: the later turn's input is chunked on
    # the ignore_eos admission path, which asserts a prefix of 0 (the session's is 2)
    "session-later-turn-chunked-with-radix-off": (
        "AssertionError at sglang/srt/managers/schedule_policy.py:add_one_req_ignore_eos:1368"
    ),
}


@pytest.mark.parametrize("name", sorted(SESSION_CRASHES))
def test_each_crash_the_streaming_campaign_shrunk_is_reported_and_gone_without_sessions(name):
    from schedcheck.fuzz.scenario import Scenario

    found = Scenario.from_json_text((SCENARIOS / f"{name}.json").read_text())
    assert [(v.invariant, v.case) for v in found.run().violations] == [
        ("engine-crash", SESSION_CRASHES[name])
    ]
    off = found.with_config(extra={**found.config.extra, "streaming_session": "false"})
    assert (off.run().violations, off.run().stuck) == ([], {})


def test_a_session_holding_kv_behind_a_request_that_needs_it_stalls_fcfs():
    """Found by hand beside the campaign: r0's session keeps its 13 slots for r1, which
    waits behind r3 (FCFS); r3 needs more than the 17 free slots, and nothing running
    will free any: the engine schedules nothing again. Clean with sessions off (r0's KV
    is the tree's, evictable) and under lpm (r1 first, on its cached prefix)."""
    trace = (
        TraceRequest("r0", 0.0, 3, prompt_token_ids=tuple(range(100, 110))),
        TraceRequest("r1", 0.001, 2, prompt_token_ids=(300, 301, 302), parent_request_id="r0"),
        TraceRequest("r3", 0.0, 4, prompt_token_ids=tuple(range(200, 213))),
    )
    stuck = run_with(trace, num_gpu_blocks=30)
    waiting = "waiting: 0 running, 17 free slots, 0 evictable"
    assert stuck.violations == []
    assert stuck.stuck == {
        "r3": waiting,
        "r1": waiting,
        "*": "the engine schedules nothing while requests wait",
    }
    off = run_with(trace, num_gpu_blocks=30, extra={"streaming_session": "false"})
    lpm = run_with(trace, num_gpu_blocks=30, extra={"schedule_policy": "lpm"})
    assert (off.violations, off.stuck, lpm.violations, lpm.stuck) == ([], {}, [], {})
