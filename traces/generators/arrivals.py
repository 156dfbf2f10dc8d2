"""Open-loop arrival times: Poisson, and gamma with a burstiness factor (as vLLM's
`bench serve --request-rate R --burstiness K`).

Gaps between consecutive arrivals are i.i.d. Gamma(shape k, scale 1 / (R k)): the mean gap
is 1 / R for every k, and the coefficient of variation (std / mean) is 1 / sqrt(k). k = 1
is a Poisson process (exponential gaps); k < 1 is burstier, k > 1 more regular. The first
request arrives at 0.0; a rate of `inf` sends everything at 0.0.

    gaps     g1   g2 g3      g4
    times  0 ──┼────┼─┼────────┼──►   t_i = g_1 + ... + g_i
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt


def gamma_arrival_times_s(
    rng: np.random.Generator, num_requests: int, rate_per_s: float, burstiness: float = 1.0
) -> npt.NDArray[np.float64]:
    """`num_requests` non-decreasing arrival times in seconds, the first at 0.0."""
    assert num_requests >= 0
    assert rate_per_s > 0, "rate_per_s > 0 (inf: all at once)"
    assert burstiness > 0 and math.isfinite(burstiness), "burstiness (gamma shape) > 0"
    if num_requests == 0:
        return np.zeros(0)
    if math.isinf(rate_per_s):
        return np.zeros(num_requests)
    gaps_s = rng.gamma(
        shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=num_requests - 1
    )
    times_s = np.concatenate(([0.0], np.cumsum(gaps_s)))
    assert times_s.shape == (num_requests,) and bool(np.all(np.diff(times_s) >= 0))
    return times_s


def poisson_arrival_times_s(
    rng: np.random.Generator, num_requests: int, rate_per_s: float
) -> npt.NDArray[np.float64]:
    """Poisson arrivals: exponential gaps of mean 1 / rate_per_s (gamma with shape 1)."""
    return gamma_arrival_times_s(rng, num_requests, rate_per_s, burstiness=1.0)
