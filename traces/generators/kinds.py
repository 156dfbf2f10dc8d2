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
from dataclasses import dataclass, fields

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
_FIELDS = frozenset(f.name for f in fields(GenOptions))


@dataclass(frozen=True, slots=True)
class _Options:
    """A generator called with the GenOptions it reads: `same` (space-separated) under
    their own name, `renamed` as (the generator's parameter, the option); `vocab_size`
    always."""

    generator: Callable[..., Iterator[TraceRequest]]
    same: str
    renamed: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        read = {*self.same.split(), *(option for _, option in self.renamed)}
        assert read <= _FIELDS, f"not GenOptions fields: {sorted(read - _FIELDS)}"

    def __call__(self, rng: np.random.Generator, o: GenOptions) -> Iterator[TraceRequest]:
        kwargs = {name: getattr(o, name) for name in self.same.split()}
        kwargs.update((param, getattr(o, option)) for param, option in self.renamed)
        return self.generator(rng, **kwargs, vocab_size=o.vocab_size)


_gamma = _Options(open_loop, "num_requests rate_per_s burstiness input_lengths output_lengths")


def _poisson(rng: np.random.Generator, o: GenOptions) -> Iterator[TraceRequest]:
    assert o.burstiness == 1.0, "poisson has burstiness 1.0; use gamma"
    return _gamma(rng, o)


KINDS: dict[str, Kind] = {
    "poisson": _poisson,
    "gamma": _gamma,
    "closed-loop": _Options(
        closed_loop,
        "num_users requests_per_user spawn_rate_per_s think_min_s think_max_s "
        "input_lengths output_lengths",
    ),
    "shared-prefix": _Options(
        shared_prefix,
        "num_groups group_size prefix_lengths output_lengths rate_per_s burstiness",
        renamed=(("suffix_lengths", "input_lengths"),),
    ),
    "multi-turn": _Options(
        multi_turn,
        "num_sessions turns rate_per_s burstiness think_min_s think_max_s "
        "first_lengths output_lengths",
        renamed=(("followup_lengths", "input_lengths"),),
    ),
}


def generate(kind: str, seed: int, options: GenOptions) -> Iterator[TraceRequest]:
    """The trace of generator `kind` for `seed` (a fresh numpy Generator of that seed)."""
    assert kind in KINDS, f"unknown generator kind {kind!r}"
    assert seed >= 0
    return KINDS[kind](np.random.default_rng(seed), options)
