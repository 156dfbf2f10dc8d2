"""The model runner's view of a step under async scheduling: what it knows, the engine not yet.

Under vLLM's AsyncScheduler step N+1 is scheduled before step N's output reaches the
scheduler. The scheduler puts placeholders (-1) where N's tokens go and, with speculative
decoding, schedules optimistically, as if every draft of step N were accepted. The model
runner, which holds N's samples and acceptance already, fills the placeholders in and runs
each request's chunk from after its last accepted token (vLLM's GPU model runner corrects
num_computed_tokens by the drafts N rejected). A request with n known tokens, 3 drafts::

    step N                rows at n-1 .. n+2:  t  d1 d2 d3     accepts d1, rejects d2 d3,
                                                                samples s at n+1 (bonus)
    step N+1, scheduled   num_computed_tokens n+3, rows n+3 .. n+6:  x  p1 p2 p3
    step N+1, as run      num_computed_tokens n+1, rows n+1 .. n+4:  s  e1 e2 e3

    x: N's bonus token, p: draft placeholders, e: the drafter's proposals after step N

The engine learns N's acceptance at update(N) and rolls its own count back by the same 2,
so its next schedule starts where the runner's chunk ended. A placeholder the runner has no
token for stays -1: the accounting and the shadow KV then report it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID, ScheduledRequest, SchedulerOutput


class InFlight(NamedTuple):
    """A step executed and not yet applied to the engine."""

    output: SchedulerOutput  # the engine's own object, placeholders and all
    sampled: dict[str, int]  # request id -> its sampled (bonus) token
    accepted: dict[str, tuple[int, ...]]  # request id -> the drafts the sampler accepted
    rejected: dict[str, int]  # request id -> how many of its drafts were rejected


def has_placeholder(r: ScheduledRequest) -> bool:
    """True if the chunk ends in a placeholder (every placeholder run is at its end)."""
    return bool(r.token_ids.size) and int(r.token_ids[-1]) == PLACEHOLDER_TOKEN_ID


def as_run(
    r: ScheduledRequest,
    outputs: Sequence[int],
    num_rejected: int,
    drafts: Sequence[int],
) -> ScheduledRequest:
    """`r` as the runner runs it: moved back by `num_rejected` drafts of the step in
    flight, its placeholders replaced by the request's `outputs` (every token the runner
    sampled for it) and by the drafter's `drafts`."""
    assert 0 <= num_rejected <= r.num_computed_tokens
    if r.spec_token_ids or num_rejected:
        r = _moved_back(r, num_rejected, drafts)
    num_known = r.num_scheduled_tokens - len(r.spec_token_ids)
    tokens = r.token_ids.copy()
    for i in np.flatnonzero(tokens[:num_known] == PLACEHOLDER_TOKEN_ID).tolist():
        output_index = r.num_computed_tokens + i - r.num_prompt_tokens  # bounded: the chunk
        if 0 <= output_index < len(outputs):
            tokens[i] = outputs[output_index]
    tokens.flags.writeable = False
    return dataclasses.replace(r, token_ids=tokens)


def _moved_back(r: ScheduledRequest, num_rejected: int, drafts: Sequence[int]) -> ScheduledRequest:
    """The chunk `num_rejected` positions earlier (its known part then all placeholders,
    filled by the caller), then the drafter's tokens for its draft slots (-1 where it has
    none)."""
    num_drafts = len(r.spec_token_ids)
    spec = tuple(int(t) for t in drafts[:num_drafts])
    spec += (PLACEHOLDER_TOKEN_ID,) * (num_drafts - len(spec))
    num_computed = r.num_computed_tokens - num_rejected
    num_known = r.num_scheduled_tokens - num_drafts
    if num_rejected:  # a decode: its known positions are outputs (filled by the caller)
        known = np.full(num_known, PLACEHOLDER_TOKEN_ID, np.int64)
    else:  # in place: the engine's tokens stand (prompt tokens of a new request, too)
        known = r.token_ids[:num_known]
    tokens = np.concatenate([known, np.asarray(spec, np.int64)])
    return dataclasses.replace(
        r,
        num_computed_tokens=num_computed,
        num_tokens=num_computed + num_known,  # a decode: its known tokens end the chunk
        token_ids=tokens,
        spec_token_ids=spec,
    )
