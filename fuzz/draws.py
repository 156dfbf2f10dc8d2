"""What a seed draws depends on the seed and this code alone, not on what a process loaded.

Hypothesis draws about 5 % of its integers, floats and strings from constants: a fixed
global set, and the literals of every "local" module (not the standard library, not
site-packages, not a test file) loaded in the process when the draw happens
(`hypothesis.internal.conjecture.providers._get_local_constants`, Hypothesis >= 6.131).
A campaign's examples then depended on which modules a process had imported: the CLI, a
spawned worker, a Ray worker and a pytest worker (whatever tests ran before in it) draw
different examples from one seed, which broke "a round's seed depends on (S, r) alone"
(seeds.py) and made tests/fuzz/test_campaign.py's one-worker / two-worker comparison
flaky; and any new integer literal anywhere in the repository changed what seeds draw.

`keep_draws_local_free()` gives Hypothesis an empty set of local constants (the global
ones stay: they are fixed by the Hypothesis version). It is private API; should it move,
`tests/fuzz/test_draws.py` fails (a seed's draws change when a module with new literals
is loaded).

`LeafDraw` takes a scenario's leaf draws the way `draw` takes them (the same choices and
spans, so the same examples) at about three quarters of the cost: a fuzz example is some
seventy of them.
"""

from __future__ import annotations

from typing import Any, TypeVar

import hypothesis.version
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers
from hypothesis.internal.conjecture.data import MAX_DEPTH
from hypothesis.strategies._internal.lazy import unwrap_strategies

try:
    from hypothesis.internal.conjecture.choice import ValueHole
except ImportError:  # Hypothesis before value holes: none can be at the next choice

    class ValueHole:  # type: ignore[no-redef]
        pass


Ex = TypeVar("Ex")


_NO_LOCAL_CONSTANTS = providers.Constants()  # what Hypothesis starts its local constants from


def _no_local_constants() -> providers.Constants:
    return _NO_LOCAL_CONSTANTS


def keep_draws_local_free() -> None:
    """From now on, no constant of a loaded module is drawn (idempotent: each campaign
    round calls it, and only the first call empties Hypothesis' pools of constants, which
    every later round would otherwise build again, some 250 constants checked an example)."""
    if providers._get_local_constants is _no_local_constants:
        return
    providers._get_local_constants = _no_local_constants
    providers.CONSTANTS_CACHE.cache.clear()  # pools built with local constants before


# -- a scenario's leaf draws, without ConjectureData.draw's per-call work ------------------

_SPAN_RECORD = "_ConjectureData__span_record"  # ConjectureData's private span record
# the Hypothesis whose ConjectureData.draw LeafDraw repeats (older ones: `draw` itself)
LEAF_DRAWS_SINCE = (6, 170)
_LEAF_DRAWS = tuple(hypothesis.version.__version_info__[:2]) >= LEAF_DRAWS_SINCE


class LeafDraw:
    """`draw` for a composite's leaf draws (an integer in a range, a boolean): the same
    choices, spans, labels and recorded values as `draw(strategy)`, for about three
    quarters of its cost (a scenario draws some seventy: about 12 us a draw instead of 16,
    `draw`'s checks that a strategy drawn inside a composite passed already left out).

    A strategy is validated and unwrapped once, at its first draw. Any draw that is not a
    plain nested draw (a ValueHole to invert at this position, the depth bound, a
    Hypothesis before LEAF_DRAWS_SINCE or without the span record) goes through `draw`
    itself. Private API, like `keep_draws_local_free`: tests/fuzz/test_draws.py checks
    that the spans and a round's examples are `draw`'s."""

    __slots__ = ("_data", "_draw", "_record")

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw
        data = getattr(draw, "__self__", None) if _LEAF_DRAWS else None
        self._record: Any = getattr(data, _SPAN_RECORD, None)
        self._data: Any = data if self._record is not None else None

    def __call__(self, strategy: st.SearchStrategy[Ex], label: object = None) -> Ex:
        data = self._data
        if data is None or label is not None or not _plain_position(data):
            return self._draw(strategy, label)
        known = _unwrapped(strategy)
        if known is None:
            return self._draw(strategy)
        unwrapped, span_label = known
        record = self._record
        span_index = record.span_count
        data.start_span(span_label)
        try:
            value: Ex = unwrapped.do_draw(data)
            record.record_value_for_span(span_index, value)
            return value
        finally:
            data.stop_span()


def _plain_position(data: Any) -> bool:
    """A nested draw with no ValueHole to invert at the next choice."""
    if not 0 < data.depth < MAX_DEPTH or data.frozen:
        return False
    prefix = data.prefix
    return (
        prefix is None or data.index >= len(prefix) or not isinstance(prefix[data.index], ValueHole)
    )


_UNWRAPPED: dict[int, tuple[Any, Any, int]] = {}  # id(strategy) -> (strategy, unwrapped, label)
UNWRAPPED_MAX = 4096  # strategies remembered (a scenario draws from a few dozen, all cached)


def _unwrapped(strategy: st.SearchStrategy[Any]) -> tuple[Any, int] | None:
    """(the strategy `draw` would run, its span label), worked out at its first draw (the
    strategy is kept, so its id stays its own); None past UNWRAPPED_MAX strategies (one
    built afresh for every draw: `draw` takes it)."""
    known = _UNWRAPPED.get(id(strategy))
    if known is None:
        if len(_UNWRAPPED) >= UNWRAPPED_MAX:
            return None
        strategy.validate()
        unwrapped = unwrap_strategies(strategy)
        known = _UNWRAPPED[id(strategy)] = (strategy, unwrapped, unwrapped.label)
    return known[1], known[2]
