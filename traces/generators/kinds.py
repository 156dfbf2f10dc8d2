"""The generator kinds by name (`schedcheck trace gen KIND`), with one options record.

    poisson        open loop, exponential gaps at `rate_per_s`, `num_requests` requests
    gamma          open loop, gamma gaps of shape `burstiness` (vLLM's --burstiness)
    closed-loop    `num_users` Locust-style users x `requests_per_user`, think time
    shared-prefix  `num_groups` groups x `group_size` prompts sharing a system prompt
    multi-turn     `num_sessions` conversations x `turns` turns, think time

`input_lengths` is the own prompt of every kind (the suffix after the system prompt for
shared-prefix, the follow-up text of later turns for multi-turn).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from schedcheck.traces.generators.closed_loop import closed_loop
from schedcheck.traces.generators.lengths import LengthSpec
from schedcheck.traces.generators.multi_turn import multi_turn
from schedcheck.traces.generators.open_loop import open_loop
from schedcheck.traces.generators.shared_prefix import shared_prefix
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE

DEFAULT_PROMPT_LENGTHS = LengthSpec.uniform(256, 1024)
DEFAULT_OUTPUT_LENGTHS = LengthSpec.uniform(16, 128)
DEFAULT_PREFIX_LENGTHS = LengthSpec.fixed(512)


@dataclass(frozen=True, slots=True)
class GenOptions:
    """Every generator option; each kind reads the ones it needs (module docstring)."""

    num_requests: int = 100
    rate_per_s: float = 10.0
    burstiness: float = 1.0
    input_lengths: LengthSpec = DEFAULT_PROMPT_LENGTHS
    output_lengths: LengthSpec = DEFAULT_OUTPUT_LENGTHS
    prefix_lengths: LengthSpec = DEFAULT_PREFIX_LENGTHS
    first_lengths: LengthSpec = DEFAULT_PROMPT_LENGTHS
    num_groups: int = 4
    group_size: int = 8
    num_users: int = 8
    requests_per_user: int = 8
    spawn_rate_per_s: float = 1.0
    think_min_s: float = 1.0
    think_max_s: float = 1.0
    num_sessions: int = 16
    turns: int = 4
    vocab_size: int = DEFAULT_VOCAB_SIZE


Kind = Callable[[np.random.Generator, GenOptions], Iterator[TraceRequest]]


def _poisson(rng: np.random.Generator, o: GenOptions) -> Iterator[TraceRequest]:
    assert o.burstiness == 1.0, "poisson has burstiness 1.0; use gamma"
    return _gamma(rng, o)


def _gamma(rng: np.random.Generator, o: GenOptions) -> Iterator[TraceRequest]:
    return open_loop(
        rng,
        num_requests=o.num_requests,
        rate_per_s=o.rate_per_s,
        burstiness=o.burstiness,
        input_lengths=o.input_lengths,
        output_lengths=o.output_lengths,
        vocab_size=o.vocab_size,
    )


def _closed_loop(rng: np.random.Generator, o: GenOptions) -> Iterator[TraceRequest]:
    return closed_loop(
        rng,
        num_users=o.num_users,
        requests_per_user=o.requests_per_user,
        spawn_rate_per_s=o.spawn_rate_per_s,
        think_min_s=o.think_min_s,
        think_max_s=o.think_max_s,
        input_lengths=o.input_lengths,
        output_lengths=o.output_lengths,
        vocab_size=o.vocab_size,
    )


def _shared_prefix(rng: np.random.Generator, o: GenOptions) -> Iterator[TraceRequest]:
    return shared_prefix(
        rng,
        num_groups=o.num_groups,
        group_size=o.group_size,
        prefix_lengths=o.prefix_lengths,
        suffix_lengths=o.input_lengths,
        output_lengths=o.output_lengths,
        rate_per_s=o.rate_per_s,
        burstiness=o.burstiness,
        vocab_size=o.vocab_size,
    )


def _multi_turn(rng: np.random.Generator, o: GenOptions) -> Iterator[TraceRequest]:
    return multi_turn(
        rng,
        num_sessions=o.num_sessions,
        turns=o.turns,
        rate_per_s=o.rate_per_s,
        burstiness=o.burstiness,
        think_min_s=o.think_min_s,
        think_max_s=o.think_max_s,
        first_lengths=o.first_lengths,
        followup_lengths=o.input_lengths,
        output_lengths=o.output_lengths,
        vocab_size=o.vocab_size,
    )


KINDS: dict[str, Kind] = {
    "poisson": _poisson,
    "gamma": _gamma,
    "closed-loop": _closed_loop,
    "shared-prefix": _shared_prefix,
    "multi-turn": _multi_turn,
}


def generate(kind: str, seed: int, options: GenOptions) -> Iterator[TraceRequest]:
    """The trace of generator `kind` for `seed` (a fresh numpy Generator of that seed)."""
    assert kind in KINDS, f"unknown generator kind {kind!r}"
    assert seed >= 0
    return KINDS[kind](np.random.default_rng(seed), options)
