"""Hypothesis' mutator groups of an example, worked out in one pass over its span trail.

Most of a campaign's examples are mutations (`ConjectureRunner.generate_mutations_from`):
Hypothesis copies one span's choices over another span of the same label. Which spans it
may pick is `Spans.mutator_groups`: per span label, in the order labels first start, the
(start, end) choice indices of its spans, leaving out spans nested in a unique
collection; only labels with two spans or more. Hypothesis replays the trail through a
visitor and builds a `Span` object per span to read its start and end: about 340 us per
example mutated from (some 75 spans), about 3 % of a reference fuzz example.

`install()` makes `Spans.mutator_groups` the same list of the same sets, computed by one
loop over the trail's records (about a tenth of the cost), so every mutation, and every
example a seed draws, is Hypothesis' own. Private API, like fuzz/draws.py: only on the
Hypothesis versions it was checked against (`GROUPS_SINCE`), and only where the trail
still reads as it did (`TrailType`); tests/fuzz/test_mutator_groups.py compares it with
Hypothesis' visitor on the spans of real examples and of unique collections.

    trail records:   > CHOICE: a span starts (label index + CHOICE + 1)
                     CHOICE: one choice        STOP_SPAN_*: the innermost open span ends
    span i:          start = choices before its start record
                     end   = choices before its stop record
"""

from __future__ import annotations

import functools
from typing import Any

import hypothesis.version
from hypothesis.internal.conjecture import data as conjecture_data

# the Hypothesis whose `_mutator_groups` this repeats (older or other ones: its own)
GROUPS_SINCE = (6, 170)
_CHOICE = 3  # TrailType.CHOICE: records above it start spans, below it stop them
# Hypothesis' own property, as this module found it (tests compare with it)
HYPOTHESIS_OWN = conjecture_data.Spans.__dict__.get("mutator_groups")


def mutator_groups(spans: Any) -> list[set[tuple[int, int]]]:
    """`Spans.mutator_groups` of `spans`: per label (in first-start order) the (start,
    end) of its spans outside unique collections, for labels with two spans or more."""
    records = spans.trail[:]  # the underlying array: no IntList item lookups
    labels = spans.labels
    unique = conjecture_data.UNIQUE_COLLECTION_LABEL
    unique_record = labels.index(unique) + _CHOICE + 1 if unique in labels else -1
    num_spans = len(spans)
    starts = [0] * num_spans
    ends = [0] * num_spans
    kept: list[tuple[int, int]] = []  # (label record, span index) in start order
    open_spans: list[int] = []
    unique_open: list[int] = []  # open unique collections: their spans are left out
    num_choices = num_started = 0
    for record in records:  # bounded: the trail's records
        if record == _CHOICE:
            num_choices += 1
        elif record > _CHOICE:  # a span starts
            i = num_started
            num_started += 1
            starts[i] = num_choices
            open_spans.append(i)
            if not unique_open:
                kept.append((record, i))
            if record == unique_record:
                unique_open.append(i)
        else:  # the innermost open span stops
            i = open_spans.pop()
            ends[i] = num_choices
            if unique_open and unique_open[-1] == i:
                unique_open.pop()
    assert num_started == num_spans and not open_spans, "every span started and stopped"
    groups: dict[int, set[tuple[int, int]]] = {}
    for record, i in kept:  # bounded: the spans
        groups.setdefault(record, set()).add((starts[i], ends[i]))
    return [g for g in groups.values() if len(g) >= 2]


def _supported() -> bool:
    """The Hypothesis this repeats: its version, its visitor, and the trail's codes."""
    trail = getattr(conjecture_data, "TrailType", None)
    return (
        tuple(hypothesis.version.__version_info__[:2]) >= GROUPS_SINCE
        and hasattr(conjecture_data, "_mutator_groups")
        and hasattr(conjecture_data.Spans, "mutator_groups")
        and trail is not None
        and int(trail.CHOICE) == _CHOICE
        and {int(trail.STOP_SPAN_DISCARD), int(trail.STOP_SPAN_NO_DISCARD)} == {1, 2}
    )


def install() -> bool:
    """`Spans.mutator_groups` from now on computed by `mutator_groups` (idempotent); False
    where this Hypothesis is not the one it repeats (its own visitor stays)."""
    current = conjecture_data.Spans.__dict__.get("mutator_groups")
    if getattr(current, "func", None) is mutator_groups:
        return True
    if not _supported():
        return False
    fast = functools.cached_property(mutator_groups)
    fast.__set_name__(conjecture_data.Spans, "mutator_groups")
    conjecture_data.Spans.mutator_groups = fast  # type: ignore[method-assign,assignment]
    return True
