"""The reference engine's async scheduling (engines/reference/async_scheduling.py): step N+1
scheduled before step N's output is applied, with placeholders, as vLLM's AsyncScheduler.

Block size 4, 10 blocks, budget 64 (refengine_helpers.engine). Prompt A: tokens 0..5."""

from __future__ import annotations

import pytest
from refengine_helpers import engine, request, summary

from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID as P

ASYNC = {"async_scheduling": "true"}


def _chunk(output):
    return [(r.request_id, r.num_computed_tokens, r.token_ids.tolist(), r.num_tokens)
            for r in output.scheduled]  # fmt: skip


@pytest.mark.parametrize("block_manager", ["hashed", "radix"])
def test_a_decode_runs_its_placeholder_before_the_prefill_is_applied(block_manager):
    eng = engine(block_manager, extra=ASYNC)
    eng.add_request(request("A", range(6), max_tokens=3))
    s0 = eng.schedule()
    assert _chunk(s0) == [("A", 0, [0, 1, 2, 3, 4, 5], 6)]
    s1 = eng.schedule()  # before update(s0): A's sample at position 6 is a placeholder
    assert _chunk(s1) == [("A", 6, [P], 7)]
    assert eng.update_from_output(s0, {"A": 50}) == []
    req = eng.scheduler.requests["A"]
    assert (req.output_token_ids, req.num_output_placeholders) == ([50, P], 1)
    assert dict(eng.kv_snapshot().num_computed_tokens()) == {"A": 7}  # 6 applied + 1 in flight
    s2 = eng.schedule()  # A's third and last output: nothing after it is scheduled
    assert _chunk(s2) == [("A", 7, [P], 8)]
    assert eng.update_from_output(s1, {"A": 51}) == []
    assert eng.schedule().scheduled == ()  # every output is known or in flight
    (done,) = eng.update_from_output(s2, {"A": 52})
    assert (done.request_id, done.output_token_ids, done.reason) == ("A", (50, 51, 52), "length")
    assert not eng.has_unfinished_requests()


def test_a_preempted_request_gets_its_stale_sample_and_waits_for_it():
    """A is preempted by the fault point while its prefill (which samples) is in flight:
    that step caches nothing, still delivers its token, and A is admitted again only once
    the token is known, with a prefix hit of nothing (the blocks were never cached)."""
    eng = engine("hashed", extra=ASYNC)
    eng.add_request(request("A", range(6), max_tokens=2))
    s0 = eng.schedule()
    assert eng.scheduler.force_preempt(0) == "preempted A"
    s1 = eng.schedule()
    assert (s1.scheduled, s1.preempted_req_ids) == ((), ("A",))
    assert eng.waiting_reasons()["A"].endswith("a sample of a step in flight is not applied yet")
    assert eng.update_from_output(s0, {"A": 50}) == []
    req = eng.scheduler.requests["A"]
    assert (req.output_token_ids, req.num_in_flight_tokens, req.num_stale_tokens) == ([50], 0, 0)
    assert eng.kv_snapshot().cached_blocks() == {}
    s2 = eng.schedule()  # re-prefill of prompt + output 50 from scratch
    assert _chunk(s2) == [("A", 0, [0, 1, 2, 3, 4, 5, 50], 7)]
    assert summary(s2)[0][3] == (2, 3)  # blocks 0, 1 went back to the free queue


def test_drafts_with_async_scheduling_are_refused():
    with pytest.raises(ValueError, match="does not schedule drafts optimistically"):
        engine("hashed", extra=ASYNC, num_speculative_tokens=2)
