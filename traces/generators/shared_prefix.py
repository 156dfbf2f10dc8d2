"""Shared-prefix groups: N groups of M prompts, each group with its own system prompt.

    group g:  [ system prompt g (shared) ][ suffix (own) ]     one of M prompts of group g

Draws, in this order: each group's system prompt (length, then tokens), the order in which
the N * M requests arrive (a permutation: groups interleave), arrival gaps, suffix
lengths, output lengths, then each suffix's tokens as requests are yielded. A suffix
length of 0 makes identical, fully cacheable prompts. Request ids `g<group>-<member>`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from schedcheck.traces.generators.arrivals import gamma_arrival_times_s
from schedcheck.traces.generators.lengths import LengthSpec
from schedcheck.traces.generators.prompts import random_tokens
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE


def shared_prefix(
    rng: np.random.Generator,
    *,
    num_groups: int,
    group_size: int,
    prefix_lengths: LengthSpec,
    suffix_lengths: LengthSpec,
    output_lengths: LengthSpec,
    rate_per_s: float,
    burstiness: float = 1.0,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> Iterator[TraceRequest]:
    """`num_groups * group_size` requests; members of a group share its system prompt."""
    assert num_groups >= 1 and group_size >= 1
    assert prefix_lengths.low >= 1 and output_lengths.low >= 1
    systems = [
        random_tokens(rng, int(length), vocab_size)
        for length in prefix_lengths.sample(rng, num_groups)
    ]
    num_requests = num_groups * group_size
    groups = rng.permutation(np.repeat(np.arange(num_groups), group_size))
    arrivals_s = gamma_arrival_times_s(rng, num_requests, rate_per_s, burstiness)
    own_lengths = suffix_lengths.sample(rng, num_requests)
    generated_lengths = output_lengths.sample(rng, num_requests)
    members_count = [0] * num_groups
    for request_index in range(num_requests):
        group = int(groups[request_index])
        suffix = random_tokens(rng, int(own_lengths[request_index]), vocab_size)
        yield TraceRequest(
            request_id=f"g{group}-{members_count[group]}",
            arrival_time_s=float(arrivals_s[request_index]),
            output_length=int(generated_lengths[request_index]),
            prompt_token_ids=systems[group] + suffix,
        )
        members_count[group] += 1
    assert members_count == [group_size] * num_groups
