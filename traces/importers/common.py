"""Pieces every importer shares: lines and CSV rows with their line numbers, number parsing
that fails with a TraceError, the arrival clock, and unique hash ids for prompts that the
source gives only as a length.

Rules common to all importers (README "Trace format"):
- request ids are `<format>-<row index>` (0-based, counted over the whole source file, so a
  request keeps its id under any window);
- arrival_time_s is counted from the source's first record; a record earlier than the one
  before it is a TraceError (sources are sorted by time);
- a length of 0 becomes 1 (`input_length` and `output_length` are >= 1 in our schema; such a
  request still takes a slot and a step);
- columns and keys the schema has no use for are ignored.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

from schedcheck.traces.errors import LineContext, TraceError
from schedcheck.traces.files import binary_lines
from schedcheck.traces.validate import show

UNIQUE_BLOCK_BITS = 16  # block index bits of a unique hash id
UNIQUE_REQUEST_LIMIT = 2 ** (44 - UNIQUE_BLOCK_BITS)  # keeps ids below validate.HASH_ID_LIMIT
IMPORT_HASH_BLOCK_SIZE = 512


def unique_hash_ids(
    request_index: int, input_length: int, block_size: int = IMPORT_HASH_BLOCK_SIZE
) -> tuple[int, ...]:
    """Hash ids no other request shares: `request_index << 16 | block_index`.

    A packing, not a mix: injective by construction, so no two requests share a block and
    the prefix-sharing ratio of such a prompt is 0.
    """
    assert 0 <= request_index < UNIQUE_REQUEST_LIMIT
    assert input_length >= 1 and block_size >= 1
    blocks_count = -(-input_length // block_size)
    assert blocks_count < 2**UNIQUE_BLOCK_BITS, "prompt too long for a unique hash id"
    base = request_index << UNIQUE_BLOCK_BITS
    return tuple(range(base, base + blocks_count))


def json_lines(path: str) -> Iterator[tuple[LineContext, dict[str, Any]]]:
    """(where, object) for every non-blank line of a JSONL file."""
    for line_index, raw in enumerate(binary_lines(path)):
        ctx = LineContext(path, line_index + 1)
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if not raw.strip():
                continue
            raise ctx.error("json", f"not valid JSON: {_reason(exc)}") from None
        if not isinstance(obj, dict):
            raise ctx.error("record", f"must be a JSON object, got {show(obj)}")
        yield ctx, obj


def csv_rows(path: str, required: tuple[str, ...]) -> Iterator[tuple[LineContext, dict[str, str]]]:
    """(where, row) for every data row of a CSV file whose header has the `required` columns."""
    reader = csv.reader(_text_lines(binary_lines(path), path))
    header = [name.strip() for name in next(reader, [])]
    for name in required:
        if name not in header:
            raise TraceError(path, 1, name, f"missing column (header: {','.join(header)})")
    for row in reader:
        ctx = LineContext(path, reader.line_num)
        if not row:
            continue
        if len(row) != len(header):
            raise ctx.error("record", f"has {len(row)} columns, the header {len(header)}")
        yield ctx, dict(zip(header, row, strict=True))


def parse_count(ctx: LineContext, column: str, text: str) -> int:
    """A token count (integer >= 0) from CSV/JSON text or number; 0 stays 0."""
    value: Any = text
    if isinstance(text, str):
        try:
            value = int(text.strip())
        except ValueError:
            raise ctx.error(column, f"must be an integer, got {show(text)}") from None
    if type(value) is not int or value < 0:
        raise ctx.error(column, f"must be an integer >= 0, got {show(value)}")
    return value


def parse_number(ctx: LineContext, column: str, text: Any) -> float:
    """A finite number >= 0 from CSV text or a JSON number."""
    value = text
    if isinstance(text, str):
        try:
            value = float(text.strip())
        except ValueError:
            raise ctx.error(column, f"must be a number, got {show(text)}") from None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ctx.error(column, f"must be a finite number >= 0, got {show(value)}")
    return float(value)


class ArrivalClock:
    """Turns a source's raw times into seconds from its first record; refuses going back."""

    __slots__ = ("_first", "_previous", "_units_per_s")

    def __init__(self, units_per_s: float) -> None:
        assert units_per_s > 0
        self._units_per_s = units_per_s
        self._first: float | None = None
        self._previous: float | None = None

    def arrival_s(self, ctx: LineContext, column: str, raw: float) -> float:
        """Seconds from the first record to this one, `raw` in source units."""
        if self._previous is not None and raw < self._previous:
            raise ctx.error(
                column,
                f"goes back in time: {raw!r} < {self._previous!r} on an earlier line "
                "(the source must be sorted by time)",
            )
        if self._first is None:
            self._first = raw
        self._previous = raw
        return (raw - self._first) / self._units_per_s  # division: correctly rounded


def at_least_one(count: int) -> int:
    """The importers' rule for zero lengths: 0 becomes 1."""
    assert count >= 0
    return max(1, count)


def _reason(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (column {exc.colno})"
    return "not UTF-8"


def _text_lines(fh: Iterable[bytes], path: str) -> Iterator[str]:
    """Lines of a binary file decoded as UTF-8 (a leading BOM dropped), faults as TraceError."""
    for line_index, raw in enumerate(fh):
        try:
            text = raw.decode("utf-8-sig" if line_index == 0 else "utf-8")
        except UnicodeDecodeError:
            raise TraceError(path, line_index + 1, "record", "not UTF-8") from None
        yield text
