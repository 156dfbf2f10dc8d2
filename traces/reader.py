"""Streaming reader of schedcheck traces (JSONL, one request per line; README "Trace format").

The file is read line by line and every request is yielded as soon as it is validated, so a
trace of 10^6 lines is never held whole: the only state kept across lines is the set of
request ids seen (for duplicates and parents) and the previous arrival time. Blank lines are
skipped. Every fault raises `TraceError`, whose text is `FILE:LINE: FIELD: what is wrong`.

Checks that need earlier lines::

    request_id         not used by an earlier line
    arrival_time_s     >= the previous line's (arrival times are non-decreasing)
    parent_request_id  names an earlier line's request_id
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

from schedcheck.traces.errors import LineContext, TraceError
from schedcheck.traces.files import binary_lines
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.validate import parse_request
from schedcheck.traces.writer import request_to_json, request_to_line, write_trace

__all__ = ["read_trace", "read_trace_lines", "request_to_json", "request_to_line", "write_trace"]


def read_trace(path: str | os.PathLike[str]) -> Iterator[TraceRequest]:
    """Yield the requests of a trace file, validating every line (raises TraceError)."""
    name = os.fspath(path)
    yield from read_trace_lines(_decoded_lines(binary_lines(name), name), name)


def read_trace_lines(lines: Iterable[str], path: str) -> Iterator[TraceRequest]:
    """Yield the requests of JSONL `lines` (line 1 first); `path` names them in errors."""
    seen_ids: set[str] = set()
    arrival_previous_s = 0.0
    for line_index, line in enumerate(lines):
        if not line.strip():
            continue
        ctx = LineContext(path, line_index + 1)
        request = parse_request(_decode(line, ctx), ctx)
        _check_against_earlier(request, ctx, seen_ids, arrival_previous_s)
        seen_ids.add(request.request_id)
        arrival_previous_s = request.arrival_time_s
        yield request


def _check_against_earlier(
    request: TraceRequest, ctx: LineContext, seen_ids: set[str], arrival_previous_s: float
) -> None:
    """Raise TraceError if `request` contradicts an earlier line."""
    if request.request_id in seen_ids:
        raise ctx.error(
            "request_id", f"duplicate: {request.request_id!r} is used by an earlier line"
        )
    if request.arrival_time_s < arrival_previous_s:
        raise ctx.error(
            "arrival_time_s",
            f"goes back in time: {request.arrival_time_s!r} < {arrival_previous_s!r} on an "
            "earlier line (arrival times must be non-decreasing)",
        )
    parent = request.parent_request_id
    if parent is not None and parent not in seen_ids:
        raise ctx.error("parent_request_id", f"names no earlier request: {parent!r}")


def _decode(line: str, ctx: LineContext) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ctx.error("json", f"not valid JSON: {exc.msg} (column {exc.colno})") from None


def _decoded_lines(fh: Iterable[bytes], path: str) -> Iterator[str]:
    """The lines of a binary file as text; a non-UTF-8 line becomes a TraceError on its line."""
    for line_index, raw in enumerate(fh):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(path, line_index + 1, "record", f"not UTF-8: {exc.reason}") from None
