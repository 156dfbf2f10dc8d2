"""One entry point for every trace source: `iter_trace(path, fmt, window options)`.

Formats: `schedcheck` (our JSONL, `reader.py`), `mooncake`, `azure`, `burstgpt`
(`importers/`). With `fmt=None` the format is told from the file: a `.csv` by its header
(`ContextTokens` -> azure, `Request tokens` -> burstgpt), anything else by its first
non-blank line (`request_id` -> schedcheck, `timestamp` + `hash_ids` -> mooncake); a `.xz`
or `.gz` file is read decompressed and told by its name without that suffix. Windowing
and time scaling follow `window.py`: in the source's seconds from its first request, first
kept arrival at 0.0, gaps times `time_scale`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

from schedcheck.traces.errors import TraceError
from schedcheck.traces.files import binary_lines, content_name
from schedcheck.traces.importers.azure import iter_azure
from schedcheck.traces.importers.burstgpt import iter_burstgpt
from schedcheck.traces.importers.mooncake import iter_mooncake
from schedcheck.traces.reader import read_trace
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.window import Window, apply_window

Source = Callable[[str], Iterator[TraceRequest]]
SOURCES: dict[str, Source] = {
    "schedcheck": read_trace,
    "mooncake": iter_mooncake,
    "azure": iter_azure,
    "burstgpt": iter_burstgpt,
}
FORMATS: tuple[str, ...] = tuple(SOURCES)
_DETECT_LINES_MAX = 1000  # blank lines tolerated before the first record


def iter_trace(
    path: str | os.PathLike[str],
    fmt: str | None = None,
    *,
    time_scale: float = 1.0,
    start_s: float | None = None,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> Iterator[TraceRequest]:
    """Yield the requests of a trace in any known format, windowed and re-timed (lazy).

    Raises TraceError (FILE:LINE: FIELD: what) for a bad line, as it is reached.
    """
    name = os.fspath(path)
    chosen = detect_format(name) if fmt is None else fmt
    if chosen not in SOURCES:
        raise ValueError(f"unknown trace format {chosen!r} (known: {', '.join(FORMATS)})")
    window = Window(start_s, duration_s, max_requests, time_scale)
    return apply_window(SOURCES[chosen](name), window)


def detect_format(path: str) -> str:
    """The format of the trace file at `path` (raises TraceError if it cannot be told)."""
    for line_index, raw in enumerate(binary_lines(path)):
        if line_index >= _DETECT_LINES_MAX:
            break
        text = raw.decode("utf-8-sig", errors="replace").strip()
        if text:
            return _format_of_first_line(path, line_index + 1, text)
    return "schedcheck"  # blank or empty: an empty trace


def _format_of_first_line(path: str, line: int, text: str) -> str:
    if content_name(path).lower().endswith(".csv"):
        header = [name.strip() for name in text.split(",")]
        if "ContextTokens" in header:
            return "azure"
        if "Request tokens" in header:
            return "burstgpt"
        raise TraceError(path, line, "format", "unknown CSV header; pass --from azure|burstgpt")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        raise TraceError(
            path, line, "format", "first record is not JSON; pass --from for a CSV file"
        ) from None
    if isinstance(obj, dict) and "request_id" in obj:
        return "schedcheck"
    if isinstance(obj, dict) and "timestamp" in obj and "hash_ids" in obj:
        return "mooncake"
    raise TraceError(
        path, line, "format", f"cannot tell the format; pass --from {'|'.join(FORMATS)}"
    )
