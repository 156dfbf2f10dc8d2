"""Closed-loop users with think time, as a Locust load test: U users, each sending R
requests one after another; a user's next request goes out `think_time_s` after its
previous one finished. Prompts are independent (no shared history).

Expressed in our schema without a parent (see `traces/sessions.py`): the user is the
`session_id` (`u<user>`), every one of its lines has `arrival_time_s` = the user's spawn
time (a lower bound; the simulator releases a line when the previous line of its session
finished plus `think_time_s`), and lines are written user by user, so arrival times are
non-decreasing. User u spawns at u / spawn_rate_per_s (Locust's spawn rate).

    user 0:  u0-0 ─finish─ think ─ u0-1 ─finish─ think ─ u0-2      spawn 0.0
    user 1:        u1-0 ─finish─ think ─ u1-1 ...                  spawn 1 / spawn_rate

Draws, in this order: think times (uniform in [think_min_s, think_max_s], as Locust's
`between`), prompt lengths, output lengths, then each prompt's tokens as yielded.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from schedcheck.traces.generators.lengths import LengthSpec
from schedcheck.traces.generators.prompts import random_tokens
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE


def closed_loop(
    rng: np.random.Generator,
    *,
    num_users: int,
    requests_per_user: int,
    spawn_rate_per_s: float,
    think_min_s: float,
    think_max_s: float,
    input_lengths: LengthSpec,
    output_lengths: LengthSpec,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> Iterator[TraceRequest]:
    """`num_users * requests_per_user` requests, user by user (see the module docstring)."""
    assert num_users >= 1 and requests_per_user >= 1
    assert spawn_rate_per_s > 0
    assert 0 <= think_min_s <= think_max_s
    assert input_lengths.low >= 1 and output_lengths.low >= 1
    num_requests = num_users * requests_per_user
    thinks_s = rng.uniform(think_min_s, think_max_s, size=num_requests)
    prompt_lengths = input_lengths.sample(rng, num_requests)
    generated_lengths = output_lengths.sample(rng, num_requests)
    for request_index in range(num_requests):
        user, turn = divmod(request_index, requests_per_user)
        spawn_s = 0.0 if math.isinf(spawn_rate_per_s) else user / spawn_rate_per_s
        yield TraceRequest(
            request_id=f"u{user}-{turn}",
            arrival_time_s=spawn_s,
            output_length=int(generated_lengths[request_index]),
            prompt_token_ids=random_tokens(rng, int(prompt_lengths[request_index]), vocab_size),
            session_id=f"u{user}",
            think_time_s=float(thinks_s[request_index]) if turn > 0 else 0.0,
        )
