"""The runner's view of an async step (sim/async_runner.py), with exact values.

A request with a 10-token prompt and 2 outputs (n = 12 known tokens) ran step N with drafts
at positions 12, 13, 14 (rows 11..14); vLLM scheduled step N+1 optimistically from 15."""

import numpy as np

from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID as P
from schedcheck.engines.protocol import ScheduledRequest
from schedcheck.sim.async_runner import as_run, has_placeholder

PROMPT = 10
OUTPUTS = [500, 501]  # the two outputs before step N


def _scheduled(num_computed: int, num_scheduled: int, num_drafts: int) -> ScheduledRequest:
    """Step N+1 as vLLM's AsyncScheduler hands it over: all placeholders."""
    return ScheduledRequest(
        "a", num_computed, num_scheduled, num_computed + num_scheduled - num_drafts, PROMPT,
        np.full(num_scheduled, P, np.int64), (1, 2, 3, 4, 5), 0,
        spec_token_ids=(P,) * num_drafts,
    )  # fmt: skip


def test_one_draft_accepted_moves_the_chunk_back_by_the_two_rejected():
    """Step N accepted 600 (position 12), rejected two, sampled 601 (position 13): the
    runner runs 601 at 13 and its drafter's 700, 701, 702 at 14, 15, 16."""
    r = as_run(_scheduled(15, 4, 3), [*OUTPUTS, 600, 601], 2, (700, 701, 702))
    assert (r.num_computed_tokens, r.num_scheduled_tokens, r.num_tokens) == (13, 4, 14)
    assert r.token_ids.tolist() == [601, 700, 701, 702]
    assert r.spec_token_ids == (700, 701, 702)
    assert r.samples and not r.token_ids.flags.writeable


def test_every_draft_accepted_keeps_the_optimistic_chunk():
    r = as_run(_scheduled(15, 4, 3), [*OUTPUTS, 600, 601, 602, 603], 0, (700, 701, 702))
    assert (r.num_computed_tokens, r.num_tokens) == (15, 16)
    assert r.token_ids.tolist() == [603, 700, 701, 702]


def test_a_budget_cut_chunk_without_drafts_moves_back_too():
    """vLLM scheduled only the bonus placeholder (no budget for drafts)."""
    r = as_run(_scheduled(15, 1, 0), [*OUTPUTS, 600], 3, ())
    assert (r.num_computed_tokens, r.num_tokens, r.token_ids.tolist()) == (12, 13, [600])


def test_what_the_runner_does_not_know_stays_a_placeholder():
    """No sample for position 13 and one draft short: both stay -1 (the accounting and
    the shadow KV report them)."""
    r = as_run(_scheduled(15, 4, 3), [*OUTPUTS, 600], 2, (700, 701))
    assert r.token_ids.tolist() == [P, 700, 701, P]
    assert r.spec_token_ids == (700, 701, P)


def test_a_plain_async_decode_only_fills_its_placeholder():
    plain = ScheduledRequest("a", 12, 1, 13, PROMPT, np.array([P]), (1, 2, 3, 4), 0)
    assert has_placeholder(plain)
    r = as_run(plain, [*OUTPUTS, 600], 0, ())
    assert (r.num_computed_tokens, r.num_tokens, r.token_ids.tolist()) == (12, 13, [600])


def test_a_new_request_with_a_draft_slot_keeps_its_prompt_tokens():
    """vLLM pads a new request's last prompt token with a draft slot (1 + K rows): nothing
    moves, the prompt token stays, the draft slot gets the drafter's token (found by the
    async + spec-decode campaign: the prompt token was lost to a placeholder)."""
    new = ScheduledRequest("b", 1, 2, 2, 2, np.array([7, P]), (1, 2), 1, spec_token_ids=(P,))
    r = as_run(new, [], 0, (9,))
    assert (r.num_computed_tokens, r.num_tokens, r.token_ids.tolist()) == (1, 2, [7, 9])
