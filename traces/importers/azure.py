"""Azure LLM inference traces 2023 (Splitwise): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`.

`TIMESTAMP` is a date-time string such as `2023-11-16 18:17:03.9799600` (up to 9 fraction
digits); arrival_time_s = its distance from the first row's, computed in integer
nanoseconds. The source gives prompt lengths only, so every prompt gets hash ids that no
other request shares (`common.unique_hash_ids`, blocks of 512): no prefix is shared.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Iterator

from schedcheck.traces.errors import LineContext
from schedcheck.traces.importers.common import (
    IMPORT_HASH_BLOCK_SIZE,
    ArrivalClock,
    at_least_one,
    csv_rows,
    parse_count,
    unique_hash_ids,
)
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.validate import show

REQUIRED = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_NS_PER_S = 10**9
_S_PER_DAY = 86_400


def iter_azure(path: str | os.PathLike[str]) -> Iterator[TraceRequest]:
    """Yield the requests of an Azure 2023 trace CSV, in file order (raises TraceError)."""
    name = os.fspath(path)
    clock = ArrivalClock(units_per_s=_NS_PER_S)
    for request_index, (ctx, row) in enumerate(csv_rows(name, REQUIRED)):
        time_ns = parse_datetime_ns(ctx, "TIMESTAMP", row["TIMESTAMP"])
        input_length = at_least_one(parse_count(ctx, "ContextTokens", row["ContextTokens"]))
        yield TraceRequest(
            request_id=f"azure-{request_index}",
            arrival_time_s=clock.arrival_s(ctx, "TIMESTAMP", time_ns),
            output_length=at_least_one(parse_count(ctx, "GeneratedTokens", row["GeneratedTokens"])),
            input_length=input_length,
            hash_ids=unique_hash_ids(request_index, input_length),
            hash_block_size=IMPORT_HASH_BLOCK_SIZE,
        )


def parse_datetime_ns(ctx: LineContext, column: str, text: str) -> int:
    """Nanoseconds since 0001-01-01 of `YYYY-MM-DD HH:MM:SS[.fraction]` (no time zone)."""
    match = _DATETIME.fullmatch(text.strip())
    if match is None:
        raise ctx.error(column, f"must be a date-time YYYY-MM-DD HH:MM:SS.fff, got {show(text)}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    try:
        days = datetime.date(year, month, day).toordinal()
    except ValueError as exc:
        raise ctx.error(column, f"not a valid date: {exc}, got {show(text)}") from None
    if hour > 23 or minute > 59 or second > 59:
        raise ctx.error(column, f"not a valid time of day, got {show(text)}")
    fraction = (match.group(7) or "").ljust(9, "0")
    seconds = days * _S_PER_DAY + hour * 3600 + minute * 60 + second
    return seconds * _NS_PER_S + int(fraction)
