"""Mooncake (FAST'25) traces: JSONL `{"timestamp": ms, "input_length", "output_length",
"hash_ids": [...]}`, each hash id naming one 512-token prompt block.

Maps to our schema one to one: `hash_block_size` 512, `hash_ids` and `input_length` as
given (so shared ids stay shared prefixes), `arrival_time_s` = (timestamp - first) / 1000.
`len(hash_ids)` must equal ceil(input_length / 512), as it does in every published record.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from schedcheck.traces.errors import LineContext
from schedcheck.traces.importers.common import (
    ArrivalClock,
    at_least_one,
    json_lines,
    parse_count,
    parse_number,
)
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.validate import HASH_ID_LIMIT, show

MOONCAKE_BLOCK_SIZE = 512
REQUIRED = ("timestamp", "input_length", "output_length", "hash_ids")


def iter_mooncake(path: str | os.PathLike[str]) -> Iterator[TraceRequest]:
    """Yield the requests of a Mooncake trace, in file order (raises TraceError)."""
    name = os.fspath(path)
    clock = ArrivalClock(units_per_s=1000)
    for request_index, (ctx, obj) in enumerate(json_lines(name)):
        for key in REQUIRED:
            if key not in obj:
                raise ctx.error(key, "missing (a Mooncake record has " + ", ".join(REQUIRED) + ")")
        input_length = at_least_one(parse_count(ctx, "input_length", obj["input_length"]))
        yield TraceRequest(
            request_id=f"mooncake-{request_index}",
            arrival_time_s=clock.arrival_s(
                ctx, "timestamp", parse_number(ctx, "timestamp", obj["timestamp"])
            ),
            output_length=at_least_one(parse_count(ctx, "output_length", obj["output_length"])),
            input_length=input_length,
            hash_ids=_hash_ids(ctx, obj, input_length),
            hash_block_size=MOONCAKE_BLOCK_SIZE,
        )


def _hash_ids(ctx: LineContext, obj: dict[str, Any], input_length: int) -> tuple[int, ...]:
    """The record's hash ids, checked: integers in range, one per 512-token block."""
    value = obj["hash_ids"]
    if type(value) is not list:
        raise ctx.error("hash_ids", f"must be a list of integers, got {show(value)}")
    for position, item in enumerate(value):
        if type(item) is not int or not 0 <= item < HASH_ID_LIMIT:
            raise ctx.error(
                "hash_ids", f"item {position} must be an integer in [0, 2**44), got {show(item)}"
            )
    blocks_expected = -(-input_length // MOONCAKE_BLOCK_SIZE)
    if len(value) != blocks_expected:
        raise ctx.error(
            "hash_ids",
            f"has {len(value)} ids, but input_length {input_length} in blocks of "
            f"{MOONCAKE_BLOCK_SIZE} needs {blocks_expected}",
        )
    return tuple(value)
