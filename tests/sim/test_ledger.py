"""The request ledger (sim/ledger.py): what the loop knows of each request, and its leaving."""

import numpy as np

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
