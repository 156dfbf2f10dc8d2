"""Windowing and time scaling of a request stream (the `--start-s/--duration-s/--max-requests`
and `--time-scale` options).

Times are in the source trace's own seconds, counted from its first request:

    source offset   o = arrival_time_s - (arrival_time_s of the source's first request)
    window          keep start_s <= o < start_s + duration_s, then the first max_requests kept
    output          arrival_time_s = (o - o of the first kept request) * time_scale

so the first kept request arrives at 0.0 and `time_scale` 0.5 halves every gap. Abort times
move with their arrival (`abort_time_s` keeps its offset from the arrival, scaled);
`think_time_s` is scaled too. A kept request whose parent was left out of the window keeps
its own prompt and loses the parent link (`parent_request_id` None): its history is gone.
The stream is read lazily and reading stops at the window's end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from schedcheck.traces.schema import TraceRequest


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """Which part of a trace to take, and how to scale its time (see the module docstring)."""

    start_s: float | None = None
    duration_s: float | None = None
    max_requests: int | None = None
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        assert self.start_s is None or self.start_s >= 0, "start_s >= 0"
        assert self.duration_s is None or self.duration_s >= 0, "duration_s >= 0"
        assert self.max_requests is None or self.max_requests >= 0, "max_requests >= 0"
        assert self.time_scale > 0, "time_scale > 0"


def apply_window(requests: Iterable[TraceRequest], window: Window) -> Iterator[TraceRequest]:
    """The requests of `window`, re-timed; lazy, stops reading at the window's end."""
    start_s = window.start_s or 0.0
    end_s = None if window.duration_s is None else start_s + window.duration_s
    kept_ids: set[str] = set()
    source_first_s: float | None = None
    kept_first_s = 0.0
    if window.max_requests == 0:
        return
    for request in requests:
        if source_first_s is None:
            source_first_s = request.arrival_time_s
        offset_s = request.arrival_time_s - source_first_s
        if end_s is not None and offset_s >= end_s:
            return  # arrivals are non-decreasing: nothing later is inside
        if offset_s < start_s:
            continue
        if not kept_ids:
            kept_first_s = offset_s
        yield _retimed(request, offset_s - kept_first_s, window.time_scale, kept_ids)
        kept_ids.add(request.request_id)
        if window.max_requests is not None and len(kept_ids) == window.max_requests:
            return  # read nothing more


def _retimed(
    request: TraceRequest, arrival_s: float, time_scale: float, kept_ids: set[str]
) -> TraceRequest:
    """`request` arriving at `arrival_s * time_scale`, its parent link cut if not kept."""
    assert arrival_s >= 0
    abort_time_s = None
    if request.abort_time_s is not None:
        abort_time_s = (arrival_s + request.abort_time_s - request.arrival_time_s) * time_scale
    parent = request.parent_request_id
    return dataclasses.replace(
        request,
        arrival_time_s=arrival_s * time_scale,
        abort_time_s=abort_time_s,
        think_time_s=request.think_time_s * time_scale,
        parent_request_id=parent if parent in kept_ids else None,
    )
