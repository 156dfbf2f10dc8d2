"""Hypothesis strategies for small traces that stress a scheduler's index arithmetic.

A trace is drawn as a list of request *plans* (what a request copies from an earlier prompt,
how long its own part is, when it arrives and is aborted), then materialized into
`TraceRequest`s. Lengths come from `boundary_lengths`: `k * block_size + delta` with delta
0, -1, +1 first and any offset after, so prompts, shared prefixes, budgets and thresholds
sit on block boundaries and next to them far more often than uniform draws put them::

    root request:  | tokens [0, num_shared) of an earlier root | own tokens (fill) |
                   0                                 num_shared      num_shared + num_own
    num_own 0:     the prompt is an earlier prompt, or a prefix of it (fully cached)
    later turn:    | parent's full prompt | parent's outputs | own tokens |
                   (parent_request_id; the simulator builds the history)
    cache_salt:    None, "a" or "b" (feature `salts`): a prefix copied across salts must
                   not be shared in the cache (vLLM's cache_salt, GHSA-rm76-4mrf-v9r8)

Time is counted in ticks of a quarter step of the `unit` cost profile (one step = 10 ms):
a gap of 0 ticks is a burst in the same step; an abort lands half a tick after a tick, so
never on a step boundary, and a few ticks after a long prompt's arrival is mid-chunk.

A per-example swarm of trace features (VOPR's options swarm) switches whole behaviours
off, so some examples have no aborts at all, others only bursts of shared prefixes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import strategies as st

from schedcheck.traces.schema import TraceRequest

STEP_S = 0.01  # one step of the `unit` cost profile
TICK_S = STEP_S / 4
T = TypeVar("T")
REQUESTS_MAX = 12
OWN_TOKENS_MAX = 192  # per request: keeps every example in milliseconds
OUTPUT_TOKENS_MAX = 8
FILLS = ("unique", "constant", "period")
_UNIQUE_STRIDE = 1000  # token ids of request i: 1000 * (i + 1) + position (< vocab 32,000)
_DELTAS = (0, -1, 1, None)  # None: any offset inside the block
_BURST_GAPS = (0, 0, 1, 4)  # ticks: mostly the same step
_SALTS = (None, "a", "b")


@dataclass(frozen=True, slots=True)
class TraceFeatures:
    """Which behaviours this example's trace has (all False: plain open-loop requests)."""

    bursts: bool = False  # arrivals mostly in the same step
    sharing: bool = False  # roots copy a prefix of an earlier root's prompt
    aborts: bool = False
    sessions: bool = False  # later turns of a conversation (parent_request_id)
    long_prompts: bool = False  # prompts up to three times the token budget
    fills: bool = False  # constant / periodic tokens: equal blocks after different prefixes
    priorities: bool = False
    salts: bool = False  # cache_salt from ("a", "b"): blocks never shared across salts


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """One request before materialization; indices name earlier plans of the same trace."""

    base_index: int | None  # copy tokens [0, num_shared_tokens) of this root's prompt
    num_shared_tokens: int
    num_own_tokens: int
    fill: str
    gap_ticks: int  # after the previous request's arrival
    output_length: int
    abort_ticks: int | None  # abort (abort_ticks + 0.5) ticks after arrival
    parent_index: int | None  # a later turn of this request
    think_ticks: int
    priority: int
    cache_salt: str | None = None

    def __post_init__(self) -> None:
        assert self.num_shared_tokens + self.num_own_tokens >= 1 or self.parent_index is not None
        assert self.base_index is None or self.parent_index is None
        assert self.fill in FILLS and self.gap_ticks >= 0 and self.output_length >= 1


# The draws' strategies, built once: Hypothesis' own strategy cache (st.integers is
# @cacheable) costs 3-4 us a call in building its key, a seventh of drawing a scenario
# (about 70 draws an example). The same strategy objects: the same choices and spans.
BOOLEANS = st.booleans()


@functools.cache
def integers(low: int, high: int) -> st.SearchStrategy[int]:
    """st.integers(low, high), built once a process."""
    return st.integers(low, high)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pick(draw: st.DrawFn, options: Sequence[T]) -> T:
    """One of `options` (shrinks towards the first): a cached integers() draw, no new strategy."""
    return options[draw(integers(0, len(options) - 1))]


def family_on(draw: st.DrawFn, families: Sequence[str], family: str) -> bool:
    """A family the engine draws is on: in every example under --family (`families`),
    else in half."""
    return family in families or draw(BOOLEANS)


def maybe_int(draw: st.DrawFn, low: int, high: int) -> int | None:
    """None (what it shrinks to) or an integer in [low, high]."""
    return draw(integers(low, high)) if draw(BOOLEANS) else None


def draw_boundary_length(draw: st.DrawFn, block_size: int, blocks_max: int, min_value: int) -> int:
    """`k * block_size + delta`, k in [0, blocks_max], delta 0 / -1 / +1 / any; >= min_value."""
    assert block_size >= 1 and blocks_max >= 0
    num_blocks = draw(integers(0, blocks_max))
    delta = pick(draw, _DELTAS)
    if delta is None:
        delta = draw(integers(0, block_size - 1))
    return max(min_value, num_blocks * block_size + delta)


@st.composite
def boundary_lengths(draw: st.DrawFn, block_size: int, blocks_max: int, min_value: int = 0) -> int:
    """The strategy of `draw_boundary_length`."""
    return draw_boundary_length(draw, block_size, blocks_max, min_value)


def draw_features(draw: st.DrawFn, priorities: bool = True, salts: bool = True) -> TraceFeatures:
    b = [draw(BOOLEANS) for _ in range(8)]
    return TraceFeatures(b[0], b[1], b[2], b[3], b[4], b[5], b[6] and priorities, b[7] and salts)


@st.composite
def trace_features(draw: st.DrawFn, priorities: bool = True) -> TraceFeatures:
    return draw_features(draw, priorities)


def own_tokens_max(block_size: int, budget_tokens: int, long_prompts: bool) -> int:
    """The longest own part of a prompt: up to 3x the budget with long prompts, else ~1x."""
    if long_prompts:
        return min(3 * budget_tokens + block_size, OWN_TOKENS_MAX)
    return min(max(budget_tokens, 2 * block_size), OWN_TOKENS_MAX // 3)


def draw_plans(
    draw: st.DrawFn,
    block_size: int,
    budget_tokens: int,
    features: TraceFeatures,
    requests_max: int = REQUESTS_MAX,
) -> tuple[RequestPlan, ...]:
    """1..requests_max plans; each may copy from or continue an earlier one."""
    assert 1 <= requests_max <= REQUESTS_MAX
    blocks_max = max(
        1, own_tokens_max(block_size, budget_tokens, features.long_prompts) // block_size
    )
    num_requests = draw(integers(1, requests_max))
    plans: list[RequestPlan] = []
    root_lengths: dict[int, int] = {}  # plan index -> its prompt length (roots only)
    for index in range(num_requests):  # bounded by requests_max
        plan = _draw_plan(draw, index, block_size, blocks_max, features, root_lengths)
        if plan.parent_index is None:
            root_lengths[index] = plan.num_shared_tokens + plan.num_own_tokens
        plans.append(plan)
    return tuple(plans)


def _draw_plan(
    draw: st.DrawFn,
    index: int,
    block_size: int,
    blocks_max: int,
    features: TraceFeatures,
    root_lengths: dict[int, int],
) -> RequestPlan:
    parent_index = None
    if features.sessions and index > 0:
        parent_index = maybe_int(draw, 0, index - 1)
    base_index, num_shared = None, 0
    if features.sharing and parent_index is None and root_lengths:
        roots = sorted(root_lengths)
        base_index = pick(draw, roots) if draw(BOOLEANS) else None
    if base_index is not None:
        base_length = root_lengths[base_index]
        shared_blocks_max = cdiv(base_length, block_size)
        num_shared = min(base_length, draw_boundary_length(draw, block_size, shared_blocks_max, 1))
    num_own = draw_boundary_length(draw, block_size, blocks_max, 0 if num_shared else 1)
    return RequestPlan(
        base_index=base_index,
        num_shared_tokens=num_shared,
        num_own_tokens=num_own,
        fill=pick(draw, FILLS) if features.fills else "unique",
        gap_ticks=pick(draw, _BURST_GAPS) if features.bursts else draw(integers(0, 24)),
        output_length=draw(integers(1, OUTPUT_TOKENS_MAX)),
        abort_ticks=maybe_int(draw, 0, 24) if features.aborts else None,
        parent_index=parent_index,
        think_ticks=draw(integers(0, 8)) if parent_index is not None else 0,
        priority=draw(integers(0, 2)) if features.priorities else 0,
        cache_salt=pick(draw, _SALTS) if features.salts else None,
    )


def fill_tokens(fill: str, request_index: int, num_tokens: int) -> tuple[int, ...]:
    """The own tokens of a request: distinct per request, constant, or period 2."""
    if fill == "constant":
        return (7,) * num_tokens
    if fill == "period":
        return tuple(7 + position % 2 for position in range(num_tokens))
    assert fill == "unique"
    first = _UNIQUE_STRIDE * (request_index + 1)
    return tuple(range(first, first + num_tokens))


def materialize(plans: tuple[RequestPlan, ...]) -> tuple[TraceRequest, ...]:
    """The trace the plans describe: ids r0, r1, ...; arrivals non-decreasing."""
    prompts: list[tuple[int, ...]] = []
    requests: list[TraceRequest] = []
    ticks = 0
    for index, plan in enumerate(plans):
        shared = (
            prompts[plan.base_index][: plan.num_shared_tokens]
            if plan.base_index is not None
            else ()
        )
        prompt = shared + fill_tokens(plan.fill, index, plan.num_own_tokens)
        prompts.append(prompt)
        ticks += plan.gap_ticks
        requests.append(_request(index, plan, prompt, ticks))
    return tuple(requests)


def _request(index: int, plan: RequestPlan, prompt: tuple[int, ...], ticks: int) -> TraceRequest:
    arrival_time_s = round(ticks * TICK_S, 9)
    abort_time_s = None
    if plan.abort_ticks is not None:
        abort_time_s = round((ticks + plan.abort_ticks + 0.5) * TICK_S, 9)
    parent = f"r{plan.parent_index}" if plan.parent_index is not None else None
    return TraceRequest(
        request_id=f"r{index}",
        arrival_time_s=arrival_time_s,
        output_length=plan.output_length,
        prompt_token_ids=prompt,
        abort_time_s=abort_time_s,
        priority=plan.priority,
        parent_request_id=parent,
        think_time_s=round(plan.think_ticks * TICK_S, 9),
        cache_salt=plan.cache_salt,
    )


@st.composite
def traces(
    draw: st.DrawFn,
    block_size: int,
    budget_tokens: int,
    features: TraceFeatures | None = None,
    requests_max: int = REQUESTS_MAX,
) -> tuple[TraceRequest, ...]:
    """A small trace (1..requests_max requests) for a given block size and token budget."""
    if features is None:
        features = draw_features(draw)
    return materialize(draw_plans(draw, block_size, budget_tokens, features, requests_max))
