"""The request ledger (sim/ledger.py): what the loop knows of each request, and its leaving."""

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.arrivals import Release
from schedcheck.sim.cost_model import profile
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.result import RunResult, SimOptions
from schedcheck.traces.schema import TraceRequest


def _ledger(told):
    result = RunResult("reference", EngineConfig(), SimOptions(), profile("unit"))
    ledger = Ledger(2, result, lambda rid, done: told.append(("arrivals", rid, done)))
    ledger.forget += [
        lambda rid: told.append(("first", rid)),
        lambda rid: told.append(("second", rid)),
    ]
    return ledger, result


def _admit(ledger, rid, max_tokens=3):
    request = TraceRequest(rid, 0.0, max_tokens, prompt_token_ids=(5, 6, 7))
    return ledger.admit(Release(request, np.array([5, 6, 7], np.int64)), 1.5)


def test_a_request_gains_tokens_up_to_its_max_tokens_the_runner_past_them():
    ledger, _ = _ledger([])
    request = _admit(ledger, "a", max_tokens=3)
    assert (request.arrival_time_s, ledger.num_tokens["a"]) == (1.5, 3)
    assert ledger.gain("a", (10, 11)) == (10, 11)
    assert ledger.gain("a", (12, 13)) == (12,)  # an engine drops accepted drafts past it
    ledger.sampled_by_runner("a", (14,))  # async: the runner samples before the engine stops
    assert (ledger.sampled["a"], ledger.num_tokens["a"]) == ([10, 11, 12, 14], 7)
    assert ledger.gain("gone", (1,)) == ()


def test_a_dropped_sample_is_forgotten_from_the_end_only():
    """Async scheduling: the engine dropped the last sample of a step in flight."""
    ledger, _ = _ledger([])
    _admit(ledger, "a", max_tokens=3)
    ledger.sampled_by_runner("a", (10, 11))
    ledger.unsample("a", (11,))
    assert (ledger.sampled["a"], ledger.num_tokens["a"]) == ([10], 4)
    with pytest.raises(AssertionError, match="a: not its last"):
        ledger.unsample("a", (11,))
    ledger.unsample("gone", (1,))  # retired meanwhile: nothing to forget


def test_a_request_leaves_once_and_every_part_is_told_in_order():
    told = []
    ledger, result = _ledger(told)
    _admit(ledger, "a")
    _admit(ledger, "b")
    ledger.gain("a", (10,))
    ledger.retire(["a", "a", "unknown"], "finished")
    ledger.retire(["b"], "aborted", (1, 2))
    assert told == [
        ("first", "a"), ("second", "a"), ("arrivals", "a", (10,)),
        ("first", "b"), ("second", "b"), ("arrivals", "b", (1, 2)),
    ]  # fmt: skip
    assert (result.finished, result.aborted, result.outputs) == (1, 1, {"a": [10], "b": [1, 2]})
    assert not ledger.live and not ledger.sampled and not ledger.num_tokens


def test_gain_all_without_drafts_is_gain_of_each_sampled_token():
    ledger, _ = _ledger([])
    _admit(ledger, "a", max_tokens=2)
    _admit(ledger, "b", max_tokens=1)
    assert ledger.gain_all({"a": 10, "b": 20, "gone": 1}, {}, kept=False) == {}
    assert ledger.gain_all({"a": 11, "b": 21}, {}, kept=False) == {}  # b is at max_tokens
    assert (ledger.sampled, ledger.num_tokens) == ({"a": [10, 11], "b": [20]}, {"a": 5, "b": 4})


def test_gain_all_with_drafts_returns_what_each_request_kept():
    ledger, _ = _ledger([])
    _admit(ledger, "a", max_tokens=3)
    _admit(ledger, "b", max_tokens=3)
    kept = ledger.gain_all({"a": 12, "b": 20}, {"a": (10, 11, 9)}, kept=False)
    assert kept == {"a": (10, 11, 9), "b": (20,)}  # drafts accepted: kept, capped
    assert ledger.gain_all({"a": 13, "b": 21}, {}, kept=True) == {"a": (), "b": (21,)}
    assert ledger.sampled == {"a": [10, 11, 9], "b": [20, 21]}


def test_context_quotes_the_last_steps_of_a_request():
    from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput

    ledger, _ = _ledger([])
    for step in range(3):  # context_steps 2: the last two kept
        r = ScheduledRequest("a", 16 * step, 16, 48, 40, np.zeros(16, np.int64), (7, 8, 9, 3))
        ledger.remember(SchedulerOutput(step, (r,)))
    assert ledger.context("a") == (
        "step 1: num_computed_tokens 16 + num_scheduled_tokens 16 of num_tokens 48 (cached 0);"
        " 4 blocks, last [8, 9, 3]",
        "step 2: num_computed_tokens 32 + num_scheduled_tokens 16 of num_tokens 48 (cached 0);"
        " 4 blocks, last [8, 9, 3]",
    )
    assert ledger.context("unknown") == ()


def test_admit_hands_the_trace_requests_fields_and_a_prompt_source_where_prompts_are_rebuilt():
    built = []

    def prompt_of(trace_request):
        built.append(trace_request.request_id)
        return np.array([5, 6, 7], np.int64)

    result = RunResult("reference", EngineConfig(), SimOptions(), profile("unit"))
    rebuilding = Ledger(2, result, lambda rid, done: None, prompt_of)
    trace_request = TraceRequest(
        "a", 0.0, 4, prompt_token_ids=(5, 6, 7), priority=2, cache_salt="s"
    )
    request = rebuilding.admit(Release(trace_request, np.array([5, 6, 7], np.int64)), 2.5)
    fields = (request.request_id, request.max_tokens, request.arrival_time_s, request.priority)
    assert (*fields, request.cache_salt, request.prompt_token_ids.tolist()) == (
        "a", 4, 2.5, 2, "s", [5, 6, 7],
    )  # fmt: skip
    assert request.prompt_source is not None and built == []  # kept no prompt: built on asking
    assert request.prompt_source().tolist() == [5, 6, 7] and built == ["a"]
    live = rebuilding.live["a"]
    assert (live.max_tokens, live.num_prompt_tokens, live.arrival_time_s) == (4, 3, 2.5)
    keeping, _ = _ledger([])  # no prompt_of: every prompt is kept, and none rebuilt
    assert _admit(keeping, "b").prompt_source is None
