"""vLLM v1's scheduler options behind the vllm-v1 adapter (tox -e vllm-v1; a test of an
option an older release lacks skips there, naming the release): async
scheduling's placeholders, the API server's queue limits, priority preemption of a request
scheduled in the same step, --vllm-option validation.

Block size 4; block 0 is vLLM's null block. Stand-in tokens as in test_vllm_v1.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from vllm_driver import (
    NEEDS_VLLM_V1,
    needs_options,
    needs_release,
    request,
    summary,
    vllm_version,
)

from schedcheck.engines.engine_fault import EngineFault
from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.engines.vllm.v1.eras import release_key

pytestmark = NEEDS_VLLM_V1

PROMPT = tuple(range(10, 20))  # 10 tokens: blocks [10..13][14..17][18 19 . .]


def _engine(extra=None, **overrides):
    from schedcheck.engines.registry import make_engine

    base = dict(
        block_size=4, num_gpu_blocks=16, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=64
    )
    base.update(overrides)
    return make_engine("vllm-v1", EngineConfig(**base, extra=extra or {}))


@needs_release("0.11.1", "0.11.0's AsyncScheduler schedules a step past max_tokens (seen here)")
def test_async_scheduling_schedules_a_step_before_the_previous_one_is_applied():
    """Step 2 is scheduled before step 1's token reaches vLLM: a's decode runs position 10
    as a placeholder (-1); the step after max_tokens is known to be reached is empty."""
    engine = _engine({"async_scheduling": "true"})
    assert type(engine.scheduler).__name__ == "AsyncScheduler"
    engine.add_request(request("a", PROMPT, 3))
    s1 = engine.schedule()
    assert [summary(r) for r in s1.scheduled] == [("a", 0, 10, 10, 10, list(PROMPT), (1, 2, 3), 0)]
    s2 = engine.schedule()
    assert [summary(r) for r in s2.scheduled] == [("a", 10, 1, 11, 10, [-1], (1, 2, 3), 0)]
    assert engine.update_from_output(s1, {"a": 7001}) == []
    s3 = engine.schedule()
    assert [summary(r) for r in s3.scheduled] == [("a", 11, 1, 12, 10, [-1], (1, 2, 3), 0)]
    assert engine.update_from_output(s2, {"a": 7002}) == []
    s4 = engine.schedule()
    assert s4.scheduled == ()  # a's third token is in flight: nothing left to run
    (done,) = engine.update_from_output(s3, {"a": 7003})
    assert (done.request_id, done.output_token_ids) == ("a", (7001, 7002, 7003))
    assert done.reason == "length"
    assert not engine.has_unfinished_requests()


@needs_options("max_num_queued_reqs")
def test_a_request_over_max_num_queued_reqs_is_rejected_as_the_api_server_does():
    engine = _engine({"vllm:max_num_queued_reqs": "1"})
    engine.add_request(request("a", PROMPT, 1))
    engine.add_request(request("b", PROMPT, 1))
    out = engine.schedule()
    assert [r.request_id for r in out.scheduled] == ["a"]
    assert out.rejected_req_ids == ("b",)
    assert out.rejected_reasons == ("queue full: 1 unfinished requests, max_num_queued_reqs 1",)
    assert engine.rare_path_counts()["queue-full-rejection"] == 1


@needs_options("max_num_queued_tokens")
def test_a_request_over_max_num_queued_tokens_is_rejected():
    """a's 10 prompt tokens have no output yet: 10 >= 10 refuses b."""
    engine = _engine({"vllm:max_num_queued_tokens": "10"})
    engine.add_request(request("a", PROMPT, 1))
    engine.add_request(request("b", PROMPT[:2], 1))
    out = engine.schedule()
    assert out.rejected_reasons == (
        "queue full: 10 prompt tokens waiting for output, max_num_queued_tokens 10",
    )


def test_the_admission_check_reads_no_request_unless_a_token_limit_is_set():
    """Each arrival costs O(1) here: the unfinished requests are counted, not walked (a
    walk per arrival made a burst of 8,000 arrivals cost 6 s of CPU)."""
    from types import SimpleNamespace

    from schedcheck.engines.vllm.v1.frontend import queue_rejection

    class Unwalkable(list):
        def __iter__(self):
            raise AssertionError("walked")

    unfinished = Unwalkable([None] * 3)
    no_limits = SimpleNamespace()
    assert queue_rejection(no_limits, unfinished) is None
    reqs_only = SimpleNamespace(max_num_queued_reqs=3, max_num_queued_tokens=None)
    assert queue_rejection(reqs_only, unfinished) == (
        "queue full: 3 unfinished requests, max_num_queued_reqs 3"
    )


def _prioritized(rid: str, prompt, priority: int) -> EngineRequest:
    arr = np.asarray(prompt, dtype=np.int64)
    arr.flags.writeable = False
    return EngineRequest(request_id=rid, prompt_token_ids=arr, max_tokens=4, priority=priority)


@needs_release("0.11.1", "0.11.0 keeps the preempted request scheduled (the test below)")
def test_priority_preempts_the_request_it_scheduled_earlier_in_the_same_step():
    """3 usable blocks. low (priority 1) is admitted first, alone: block 1. Step 2: low's
    decode takes block 2, high (priority 0) is admitted into block 3. Step 3: low, first in
    the running queue, is scheduled (position 5 fits block 2); high's decode needs a block,
    none is free, and the priority policy preempts the lowest-priority running request:
    low, which this very schedule() call had scheduled."""
    engine = _engine({"policy": "priority"}, num_gpu_blocks=4, max_num_batched_tokens=8)
    engine.add_request(_prioritized("low", range(100, 104), priority=1))
    s1 = engine.schedule()
    engine.update_from_output(s1, {"low": 7001})
    engine.add_request(_prioritized("high", range(200, 204), priority=0))
    s2 = engine.schedule()
    assert [(r.request_id, r.block_table) for r in s2.scheduled] == [
        ("low", (1, 2)),
        ("high", (3,)),
    ]
    engine.update_from_output(s2, {"low": 7002, "high": 7003})
    assert engine.rare_path_counts()["preempt-scheduled-same-step"] == 0
    s3 = engine.schedule()
    assert [summary(r)[:4] for r in s3.scheduled] == [("high", 4, 1, 5)]
    assert s3.preempted_req_ids == ("low",)
    assert engine.rare_path_counts()["preempt-scheduled-same-step"] == 1


@needs_options(
    "watermark", "max_num_scheduled_tokens", "scheduler_reserve_full_isl", "max_num_queued_reqs"
)
def test_vllm_options_reach_the_scheduler_config():
    engine = _engine(
        {
            "vllm:watermark": "0.25",
            "vllm:max_num_scheduled_tokens": "12",
            "vllm:scheduler_reserve_full_isl": "false",
            "vllm:max_num_queued_reqs": "none",
        }
    )
    cfg = engine.scheduler.scheduler_config
    assert (cfg.watermark, cfg.max_num_scheduled_tokens, cfg.scheduler_reserve_full_isl) == (
        0.25,
        12,
        False,
    )
    assert cfg.max_num_queued_reqs is None
    assert engine.scheduler.max_num_scheduled_tokens == 12
    assert engine.scheduler.kv_cache_manager.watermark_blocks == 4  # int(0.25 * 16)


def _replay(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", "replay", "--engine", "vllm-v1", *flags],
        capture_output=True,
        text=True,
        timeout=600,
    )


@needs_release("0.33.0", "the known-option list holds 0.33.0's SchedulerConfig fields")
def test_an_unknown_vllm_option_is_exit_2_naming_the_known_ones():
    from schedcheck.engines.vllm.v1.options import settable_fields

    done = _replay("--vllm-option", "bogus=1")
    assert done.returncode == 2
    prefix = "schedcheck: error: --vllm-option bogus: not a SchedulerConfig field; known: "
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(prefix)
    known = last[len(prefix) :].split(", ")
    assert known == sorted(settable_fields())  # the installed release's, in order
    assert {  # 0.33.0's; 0.34.0 adds cache_aware_admission_*, max_num_inflight_kv_loads
        "disable_hybrid_kv_cache_manager",
        "long_prefill_token_threshold_adaptive",
        "max_num_active_seqs",
        "max_num_queued_reqs",
        "max_num_queued_tokens",
        "max_num_scheduled_tokens",
        "prefill_schedule_interval",
        "scheduler_reserve_full_isl",
        "stream_interval",
        "watermark",
    } <= set(known)


@needs_options("watermark")
def test_a_vllm_option_of_the_wrong_type_or_owned_by_a_flag_is_exit_2():
    done = _replay("--vllm-option", "watermark=high")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (
        2,
        "schedcheck: error: --vllm-option watermark=high: not a float",
    )
    done = _replay("--vllm-option", "max_num_seqs=3")
    assert done.stderr.strip().splitlines()[-1] == (
        "schedcheck: error: --vllm-option max_num_seqs: set it with --max-num-seqs"
    )


def test_replay_with_async_scheduling_reports_placeholders(tmp_path):
    done = _replay("--max-requests", "8", "--async-scheduling", "--json")
    assert done.returncode == 0, done.stderr
    summary_json = json.loads(done.stdout)
    assert summary_json["finished"] == 8
    assert summary_json["coverage"]["async-output-placeholder"] > 0


def test_requests_added_at_one_simulated_time_get_increasing_arrival_times():
    """vLLM stamps time.time(): the adapter never hands it two equal arrival times."""
    engine = _engine({"policy": "priority"})
    for rid in ("b", "a", "c"):
        engine.add_request(request(rid, PROMPT, 1))
    stamps = [engine.scheduler.requests[rid].arrival_time for rid in ("b", "a", "c")]
    assert stamps == [0.0, 1e-6, 2e-6]


@needs_options("max_num_active_seqs", "scheduler_reserve_full_isl")  # the bundle's
def test_the_tied_arrivals_liveness_was_a_harness_false_positive():
    """The first priority campaign's liveness finding: r7 and r9 arrived in one tick with
    one priority, so max((priority, arrival_time)) picked the head of the running queue
    as victim every time and the two preempted each other for ever. With vLLM's distinct
    arrival stamps the newest is preempted and every request finishes."""
    from pathlib import Path

    from schedcheck.sim.bundles import rerun_bundle

    bundle = Path(__file__).parent / "false_positives" / "0.33.0-v1-priority-tied-arrivals-liveness"
    result, recorded = rerun_bundle(bundle)
    assert recorded.summary["stuck"]  # it was recorded as a liveness failure
    assert (result.exit_code, result.finished, result.steps) == (0, 5, 27)


@pytest.mark.skipif(
    vllm_version() is None or release_key(vllm_version() or "0") >= (0, 11, 1),
    reason="a bug of vLLM 0.11.0 and older, fixed in 0.11.1",
)
def test_0_11_0_keeps_a_request_it_preempted_in_num_scheduled_tokens():
    """The scenario above before 0.11.1: the priority policy preempts low after scheduling
    it, but low stays in num_scheduled_tokens (0.11.1 also drops its tokens, blocks and
    drafts from the step). 0.11.0: the adapter reports it as the engine's fault; 0.10.1.1:
    vLLM's own count check at the end of schedule() fails first. Both: engine-crash."""
    engine = _engine({"policy": "priority"}, num_gpu_blocks=4, max_num_batched_tokens=8)
    engine.add_request(_prioritized("low", range(100, 104), priority=1))
    engine.update_from_output(engine.schedule(), {"low": 7001})
    engine.add_request(_prioritized("high", range(200, 204), priority=0))
    engine.update_from_output(engine.schedule(), {"low": 7002, "high": 7003})
    with pytest.raises((AssertionError, EngineFault)) as raised:
        engine.schedule()
    if vllm_version() == "0.10.1.1":
        assert raised.type is AssertionError  # vLLM's own assert
        assert raised.traceback[-1].path.name == "scheduler.py"
    else:  # the adapter's word that vLLM broke its contract: the engine's finding
        assert raised.type is EngineFault and raised.value.invariant == "engine-crash"
        assert "vLLM scheduled ['low'] in num_scheduled_tokens" in str(raised.value)


@needs_options("cache_aware_admission_window")
def test_cache_aware_admission_moves_a_cached_prefix_ahead_and_is_counted():
    """a's two full blocks [10..13][14..17] are cached when it finishes; b (cold) arrives
    before c (a's prompt + 2): the window puts c first, as its 8 cached tokens say."""
    extra = {
        "vllm:cache_aware_admission_window": "4",
        "vllm:cache_aware_admission_threshold": "0.0",
    }
    engine = _engine(extra, max_num_seqs=1)
    engine.add_request(request("a", PROMPT, 1))
    s1 = engine.schedule()
    (done,) = engine.update_from_output(s1, {"a": 7001})
    assert done.request_id == "a"
    engine.add_request(request("b", tuple(range(50, 60)), 1))
    engine.add_request(request("c", (*PROMPT, 20, 21), 1))
    s2 = engine.schedule()
    assert [(r.request_id, r.num_computed_tokens) for r in s2.scheduled] == [("c", 8)]
    assert engine.rare_path_counts()["cache-aware-reorder"] == 1


def test_a_release_without_cache_aware_admission_leaves_its_path_out():
    engine = _engine()
    has_window = hasattr(engine.scheduler, "_reorder_waiting_by_cached_prefix")
    assert ("cache-aware-reorder" in engine.rare_path_counts()) == has_window
    assert engine.rare_path_counts().get("cache-aware-reorder", 0) == 0
