"""Multi-turn conversations: S sessions of T turns; each turn continues the previous one.

Turn t > 0 has `parent_request_id` = turn t - 1, so its full prompt is the previous turn's
full prompt + that turn's output + its own new text (the simulator builds it), and it is
sent `think_time_s` after the previous turn finished. Sessions start open loop (gamma
arrivals, burstiness 1.0 = Poisson); every turn's `arrival_time_s` is its session's start
(a lower bound), lines are written session by session.

    turn 0:  [ own 0 ]                                   -> output 0
    turn 1:  [ own 0 ][ output 0 ][ own 1 ]              -> output 1
    turn 2:  [ own 0 ][ output 0 ][ own 1 ][ output 1 ][ own 2 ]

Draws, in this order: session starts, think times (uniform), own prompt lengths (turn 0
from `first_lengths`, later turns from `followup_lengths`), output lengths, then each own
prompt's tokens as yielded. Ids `s<session>-<turn>`, session ids `s<session>`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from schedcheck.traces.generators.arrivals import gamma_arrival_times_s
from schedcheck.traces.generators.lengths import LengthSpec
from schedcheck.traces.generators.prompts import random_tokens
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE


def multi_turn(
    rng: np.random.Generator,
    *,
    num_sessions: int,
    turns: int,
    rate_per_s: float,
    burstiness: float = 1.0,
    think_min_s: float,
    think_max_s: float,
    first_lengths: LengthSpec,
    followup_lengths: LengthSpec,
    output_lengths: LengthSpec,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> Iterator[TraceRequest]:
    """`num_sessions * turns` requests, session by session (see the module docstring)."""
    assert num_sessions >= 1 and turns >= 1
    assert 0 <= think_min_s <= think_max_s
    assert first_lengths.low >= 1 and followup_lengths.low >= 1 and output_lengths.low >= 1
    num_requests = num_sessions * turns
    starts_s = gamma_arrival_times_s(rng, num_sessions, rate_per_s, burstiness)
    thinks_s = rng.uniform(think_min_s, think_max_s, size=num_requests)
    firsts = first_lengths.sample(rng, num_sessions)
    followups = followup_lengths.sample(rng, num_requests)
    generated_lengths = output_lengths.sample(rng, num_requests)
    for request_index in range(num_requests):
        session, turn = divmod(request_index, turns)
        own_length = int(firsts[session] if turn == 0 else followups[request_index])
        yield TraceRequest(
            request_id=f"s{session}-{turn}",
            arrival_time_s=float(starts_s[session]),
            output_length=int(generated_lengths[request_index]),
            prompt_token_ids=random_tokens(rng, own_length, vocab_size),
            session_id=f"s{session}",
            parent_request_id=f"s{session}-{turn - 1}" if turn > 0 else None,
            think_time_s=float(thinks_s[request_index]) if turn > 0 else 0.0,
        )
