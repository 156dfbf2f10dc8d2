"""The reference engine's speculative decoding with acceptance: drafts scheduled with the
decode, accepted drafts + bonus appended, num_computed_tokens rolled back, caching after.

Block size 4, 10 blocks, budget 64 (refengine_helpers.engine). Prompt A: tokens 0..5.
"""

from __future__ import annotations

from refengine_helpers import engine, request, summary


def _prefilled(**options):
    eng = engine("hashed", num_speculative_tokens=3, **options)
    eng.add_request(request("A", range(6), max_tokens=8))
    out = eng.schedule()
    eng.update_from_output(out, {"A": 50})
    return eng


def test_drafts_run_after_the_last_token_and_accepted_ones_are_appended():
    eng = _prefilled()
    eng.update_draft_token_ids({"A": (60, 61, 62)})
    out = eng.schedule()
    (a,) = out.scheduled
    assert summary(out) == [("A", 6, 4, (0, 1, 2))]  # positions 6..9: 50, 60, 61, 62
    assert (a.token_ids.tolist(), a.spec_token_ids, a.num_tokens, a.samples) == (
        [50, 60, 61, 62],
        (60, 61, 62),
        7,
        True,
    )
    eng.update_from_output(out, {"A": 70}, {"A": (60, 61)})  # 62 rejected, bonus 70
    req = eng.scheduler.requests["A"]
    assert req.output_token_ids == [50, 60, 61, 70]
    assert (req.num_tokens, req.num_computed_tokens) == (10, 9)
    assert dict(eng.kv_snapshot().num_computed_tokens()) == {"A": 9}
    assert sorted(eng.kv_snapshot().cached_blocks()) == [0, 1]  # keys 0..7; block 2 partial


def test_drafts_are_cut_to_the_budget_and_dropped_without_a_proposal():
    eng = _prefilled()
    eng.update_draft_token_ids({"A": (60, 61, 62)})
    eng.scheduler.reduce_next_budget(2)  # the fault point: one step with a budget of 2
    out = eng.schedule()
    assert [(r.num_scheduled_tokens, r.spec_token_ids) for r in out.scheduled] == [(2, (60,))]
    eng.update_from_output(out, {"A": 70}, {"A": ()})  # 60 rejected
    out = eng.schedule()  # no new proposal: a plain decode of the bonus
    assert [
        (r.num_computed_tokens, r.token_ids.tolist(), r.spec_token_ids) for r in out.scheduled
    ] == [(7, [70], ())]


def test_proposals_for_a_request_mid_prefill_are_ignored():
    eng = engine("hashed", num_speculative_tokens=2, max_num_batched_tokens=4)
    eng.add_request(request("A", range(6), max_tokens=2))
    out = eng.schedule()  # chunk 0..3 of 6: samples nothing
    eng.update_from_output(out, {})
    eng.update_draft_token_ids({"A": (60, 61)})
    assert eng.scheduler.requests["A"].spec_token_ids == ()


def test_a_request_that_cannot_hold_its_drafts_is_rejected():
    """4 blocks of 4 = 16 slots; 6 + 8 - 1 = 13 KV tokens + 3 drafts = 16: fits. 9 outputs:
    17 slots: rejected at once, never stalled."""
    eng = engine("hashed", num_speculative_tokens=3, num_gpu_blocks=4)
    eng.add_request(request("A", range(6), max_tokens=8))
    eng.add_request(request("B", range(6), max_tokens=9))
    out = eng.schedule()
    assert out.rejected_req_ids == ("B",)
    assert out.rejected_reasons == (
        "needs 5 KV blocks for 14 tokens + 3 lookahead; the cache has 4 blocks of 4 tokens",
    )
