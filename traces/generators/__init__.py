"""Trace generators. Every one takes ONE explicitly passed, seeded `numpy.random.Generator`
and yields TraceRequests; the same seed gives the same trace, in any process."""

from schedcheck.traces.generators.arrivals import gamma_arrival_times_s, poisson_arrival_times_s
from schedcheck.traces.generators.closed_loop import closed_loop
from schedcheck.traces.generators.kinds import KINDS, GenOptions, generate
from schedcheck.traces.generators.lengths import LengthSpec
from schedcheck.traces.generators.multi_turn import multi_turn
from schedcheck.traces.generators.open_loop import open_loop
from schedcheck.traces.generators.shared_prefix import shared_prefix

__all__ = [
    "KINDS",
    "GenOptions",
    "LengthSpec",
    "closed_loop",
    "gamma_arrival_times_s",
    "generate",
    "multi_turn",
    "open_loop",
    "poisson_arrival_times_s",
    "shared_prefix",
]
