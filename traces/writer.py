"""Canonical JSON of trace requests, and the trace writer (used by importers, generators and
the simulator's bundles).

Canonical form: keys sorted; optional fields that are None or at their default
(`priority` 0, `think_time_s` 0.0) are omitted; tuples become lists; compact separators. The
same request always gives the same bytes, so a trace file is stable under read -> write.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import IO, Any

from schedcheck.traces.schema import TraceRequest

_DEFAULTS: dict[str, Any] = {"priority": 0, "think_time_s": 0.0}
_FIELDS = TraceRequest.__slots__


def request_to_json(request: TraceRequest) -> dict[str, Any]:
    """The canonical JSON object of a request: keys sorted, None/default fields omitted."""
    obj: dict[str, Any] = {}
    for name in sorted(_FIELDS):
        value = getattr(request, name)
        if value is None or (name in _DEFAULTS and value == _DEFAULTS[name]):
            continue
        obj[name] = list(value) if isinstance(value, tuple) else value
    assert "request_id" in obj and "output_length" in obj
    return obj


def request_to_line(request: TraceRequest) -> str:
    """One JSONL line (no trailing newline) of a request, canonical."""
    return json.dumps(request_to_json(request), separators=(",", ":"), allow_nan=False)


def write_trace(
    path_or_file: str | os.PathLike[str] | IO[str], requests: Iterable[TraceRequest]
) -> int:
    """Write `requests` as JSONL to a path or an open text file; returns the count written."""
    if isinstance(path_or_file, str | os.PathLike):
        with open(path_or_file, "w", encoding="utf-8") as fh:
            return _write_lines(fh, requests)
    return _write_lines(path_or_file, requests)


def _write_lines(fh: IO[str], requests: Iterable[TraceRequest]) -> int:
    count = 0
    for request in requests:
        fh.write(request_to_line(request) + "\n")
        count += 1
    return count
