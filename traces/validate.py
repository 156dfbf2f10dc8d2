"""Validation of one trace line: a decoded JSON object -> TraceRequest, or a TraceError.

Checks everything that can be checked on the line alone (types, ranges, unknown fields,
the two prompt forms); `reader.py` checks what needs earlier lines (duplicate ids, arrival
order, parents). JSON `null` in an optional field means the field is absent.

Prompt forms (exactly one)::

    "prompt_token_ids": [t0, t1, ...]                      explicit tokens, 0 <= t < 2**31
    "input_length": L, "hash_ids": [h0, ...], "hash_block_size": B
                                                           len(hash_ids) == ceil(L / B),
                                                           0 <= h < 2**44 (tokens.py packs h << 20)
"""

from __future__ import annotations

import json
import math
from typing import Any

from schedcheck.traces.errors import LineContext
from schedcheck.traces.schema import TraceRequest

TOKEN_ID_LIMIT = 2**31
HASH_ID_LIMIT = 2**44
HASH_FORM = ("input_length", "hash_ids", "hash_block_size")
FIELDS = (
    "request_id",
    "arrival_time_s",
    "output_length",
    "prompt_token_ids",
    *HASH_FORM,
    "abort_time_s",
    "priority",
    "session_id",
    "parent_request_id",
    "think_time_s",
    "cache_salt",
)
_KNOWN = frozenset(FIELDS)
_SHOW_CHARS_MAX = 40


def parse_request(obj: Any, ctx: LineContext) -> TraceRequest:
    """The TraceRequest a decoded line describes; raises TraceError on the first fault."""
    if not isinstance(obj, dict):
        raise ctx.error("record", f"must be a JSON object, got {show(obj)}")
    for name in obj:  # file order: the first unknown field is reported
        if name not in _KNOWN:
            raise ctx.error(name, "unknown field (not in the trace schema)")
    fields = {name: value for name, value in obj.items() if value is not None}
    request = TraceRequest(
        request_id=_text(ctx, fields, "request_id", required=True) or "",
        arrival_time_s=_time(ctx, fields, "arrival_time_s", required=True) or 0.0,
        output_length=_integer(ctx, fields, "output_length", minimum=1, required=True) or 1,
        **_prompt(ctx, fields),
        abort_time_s=_time(ctx, fields, "abort_time_s"),
        priority=_integer(ctx, fields, "priority") or 0,
        session_id=_text(ctx, fields, "session_id"),
        parent_request_id=_text(ctx, fields, "parent_request_id"),
        think_time_s=_time(ctx, fields, "think_time_s") or 0.0,
        cache_salt=_text(ctx, fields, "cache_salt"),
    )
    if request.abort_time_s is not None and request.abort_time_s < request.arrival_time_s:
        raise ctx.error(
            "abort_time_s",
            f"must be >= arrival_time_s ({request.arrival_time_s!r}), got {request.abort_time_s!r}",
        )
    return request


def show(value: Any) -> str:
    """A short JSON rendering of a bad value, for messages."""
    text = json.dumps(value)
    if len(text) > _SHOW_CHARS_MAX:
        return text[: _SHOW_CHARS_MAX - 3] + "..."
    return text


def _prompt(ctx: LineContext, fields: dict[str, Any]) -> dict[str, Any]:
    """The prompt fields of a TraceRequest: exactly one of the two forms."""
    has_tokens = "prompt_token_ids" in fields
    has_hash = any(name in fields for name in HASH_FORM)
    if has_tokens and has_hash:
        raise ctx.error(
            "prompt",
            "give either prompt_token_ids or input_length + hash_ids + hash_block_size, not both",
        )
    if not has_tokens and not has_hash:
        raise ctx.error(
            "prompt", "missing: give prompt_token_ids or input_length + hash_ids + hash_block_size"
        )
    if has_tokens:
        tokens = _int_list(ctx, fields, "prompt_token_ids", TOKEN_ID_LIMIT)
        return {"prompt_token_ids": tokens}
    for name in HASH_FORM:
        if name not in fields:
            raise ctx.error(name, "missing (input_length, hash_ids, hash_block_size come together)")
    input_length = _integer(ctx, fields, "input_length", minimum=1, required=True)
    block_size = _integer(ctx, fields, "hash_block_size", minimum=1, required=True)
    hash_ids = _int_list(ctx, fields, "hash_ids", HASH_ID_LIMIT)
    assert input_length is not None and block_size is not None
    blocks_expected = -(-input_length // block_size)
    if len(hash_ids) != blocks_expected:
        raise ctx.error(
            "hash_ids",
            f"has {len(hash_ids)} ids, but input_length {input_length} in blocks of "
            f"{block_size} needs {blocks_expected}",
        )
    return {"input_length": input_length, "hash_ids": hash_ids, "hash_block_size": block_size}


def _integer(
    ctx: LineContext,
    fields: dict[str, Any],
    name: str,
    *,
    minimum: int | None = None,
    required: bool = False,
) -> int | None:
    """An integer field (JSON bools and floats are refused), at least `minimum`."""
    if name not in fields:
        if required:
            raise ctx.error(name, "missing (a required field)")
        return None
    value = fields[name]
    if type(value) is not int:
        raise ctx.error(name, f"must be an integer, got {show(value)}")
    if minimum is not None and value < minimum:
        raise ctx.error(name, f"must be >= {minimum}, got {value}")
    return value


def _time(
    ctx: LineContext, fields: dict[str, Any], name: str, *, required: bool = False
) -> float | None:
    """A time in seconds: a finite JSON number >= 0, returned as float."""
    if name not in fields:
        if required:
            raise ctx.error(name, "missing (a required field)")
        return None
    value = fields[name]
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ctx.error(name, f"must be a finite number of seconds, got {show(value)}")
    if value < 0:
        raise ctx.error(name, f"must be >= 0, got {value!r}")
    return float(value)


def _text(
    ctx: LineContext, fields: dict[str, Any], name: str, *, required: bool = False
) -> str | None:
    """A non-empty string field."""
    if name not in fields:
        if required:
            raise ctx.error(name, "missing (a required field)")
        return None
    value = fields[name]
    if type(value) is not str or not value:
        raise ctx.error(name, f"must be a non-empty string, got {show(value)}")
    return value


def _int_list(ctx: LineContext, fields: dict[str, Any], name: str, limit: int) -> tuple[int, ...]:
    """A non-empty list of integers in [0, limit)."""
    value = fields[name]
    if type(value) is not list or not value:
        raise ctx.error(name, f"must be a non-empty list of integers, got {show(value)}")
    assert limit & (limit - 1) == 0, "limits are powers of two"
    exponent = limit.bit_length() - 1
    for position, item in enumerate(value):
        if type(item) is not int or not 0 <= item < limit:
            raise ctx.error(
                name, f"item {position} must be an integer in [0, 2**{exponent}), got {show(item)}"
            )
    return tuple(value)
