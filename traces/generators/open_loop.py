"""Open-loop requests: Poisson or gamma arrivals, independent random prompts.

Draws, in this order, from the one generator passed in: arrival gaps, prompt lengths,
output lengths, then each prompt's tokens as the requests are yielded. The iterator owns
`rng` until it is exhausted (drawing from it in between changes what follows).
Request ids `r0`, `r1`, ...
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from schedcheck.traces.generators.arrivals import gamma_arrival_times_s
from schedcheck.traces.generators.lengths import LengthSpec
from schedcheck.traces.generators.prompts import random_tokens
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE


def open_loop(
    rng: np.random.Generator,
    *,
    num_requests: int,
    rate_per_s: float,
    burstiness: float = 1.0,
    input_lengths: LengthSpec,
    output_lengths: LengthSpec,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> Iterator[TraceRequest]:
    """`num_requests` requests with gamma(burstiness) arrivals (1.0: Poisson)."""
    assert input_lengths.low >= 1 and output_lengths.low >= 1
    arrivals_s = gamma_arrival_times_s(rng, num_requests, rate_per_s, burstiness)
    prompt_lengths = input_lengths.sample(rng, num_requests)
    generated_lengths = output_lengths.sample(rng, num_requests)
    for request_index in range(num_requests):
        yield TraceRequest(
            request_id=f"r{request_index}",
            arrival_time_s=float(arrivals_s[request_index]),
            output_length=int(generated_lengths[request_index]),
            prompt_token_ids=random_tokens(rng, int(prompt_lengths[request_index]), vocab_size),
        )
