"""Delta debugging (Zeller and Hildebrandt's ddmin) on a trace's requests.

Hypothesis shrinks what Hypothesis found. A failure found elsewhere (a replayed real trace,
a bundle from a user) has no choice sequence to shrink, so ddmin removes requests instead:
split the requests into n chunks; keep one chunk if it alone still fails, else drop one
chunk if the rest still fails, else split finer; stop when no single request can be
removed (the result is 1-minimal)::

    n = 2:   [r0 r1 r2 r3 | r4 r5 r6 r7]     try each half, then each complement
    n = 4:   [r0 r1 | r2 r3 | r4 r5 | r6 r7]
    ...      until n == len(requests) and no complement fails

`subtrace` keeps a valid trace when a parent is removed: its later turns lose their
parent_request_id and run with their own prompt only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from schedcheck.traces.schema import TraceRequest

T = TypeVar("T")
TESTS_MAX = 2_000  # runs of the predicate; ddmin needs O(n^2) at worst


def ddmin(
    items: Sequence[T], fails: Callable[[tuple[T, ...]], bool], tests_max: int = TESTS_MAX
) -> tuple[T, ...]:
    """A 1-minimal subsequence of `items` (order kept) for which `fails` holds.

    `fails(tuple(items))` must hold. Each distinct subsequence is tested at most once; at
    most `tests_max` tests are run, after which the smallest failing one so far is returned.
    """
    current = tuple(range(len(items)))
    assert current, "ddmin needs at least one item"
    tested: dict[tuple[int, ...], bool] = {}

    def test(indices: tuple[int, ...]) -> bool:
        if indices not in tested:
            tested[indices] = len(tested) < tests_max and fails(tuple(items[i] for i in indices))
        return tested[indices]

    num_chunks = 2
    while len(current) >= 2 and len(tested) < tests_max:  # bounded: tests_max
        chunks = _split(current, num_chunks)
        smaller = _first_failing(chunks, test)
        if smaller is not None:
            current, num_chunks = smaller, 2
            continue
        complements = [_without(current, chunk) for chunk in chunks]
        smaller = _first_failing(complements, test) if len(chunks) > 2 else None
        if smaller is not None:
            current, num_chunks = smaller, max(num_chunks - 1, 2)
            continue
        if num_chunks >= len(current):
            break
        num_chunks = min(2 * num_chunks, len(current))
    return tuple(items[i] for i in current)


def _split(indices: tuple[int, ...], num_chunks: int) -> list[tuple[int, ...]]:
    """`num_chunks` contiguous chunks of nearly equal length."""
    size, rest = divmod(len(indices), num_chunks)
    chunks, start = [], 0
    for chunk_index in range(num_chunks):
        stop = start + size + (1 if chunk_index < rest else 0)
        chunks.append(indices[start:stop])
        start = stop
    return [c for c in chunks if c]


def _without(indices: tuple[int, ...], chunk: tuple[int, ...]) -> tuple[int, ...]:
    drop = frozenset(chunk)
    return tuple(i for i in indices if i not in drop)


def _first_failing(
    candidates: list[tuple[int, ...]], test: Callable[[tuple[int, ...]], bool]
) -> tuple[int, ...] | None:
    for candidate in candidates:
        if candidate and test(candidate):
            return candidate
    return None


def subtrace(requests: Sequence[TraceRequest]) -> tuple[TraceRequest, ...]:
    """`requests` as a valid trace: parent ids naming a removed request are dropped."""
    kept: set[str] = set()
    out: list[TraceRequest] = []
    for request in requests:
        if request.parent_request_id is not None and request.parent_request_id not in kept:
            request = dataclasses.replace(request, parent_request_id=None, think_time_s=0.0)
        kept.add(request.request_id)
        out.append(request)
    return tuple(out)
