"""BurstGPT (KDD'25) traces: CSV `Timestamp,Model,Request tokens,Response tokens,Total
tokens,Log Type` (Timestamp in seconds), and the v2.0 variant with `Session ID` and
`Elapsed time` columns.

Rules (README "Trace format"):
- arrival_time_s = Timestamp - the first row's; `Model`, `Total tokens`, `Log Type` and
  `Elapsed time` (the recorded latency) are not used;
- a row with an empty or absent `Session ID` (API-log rows) is an open-loop request;
- rows of one session are one user: `session_id` = the Session ID, released no earlier than
  the previous row of the session finished (see `traces/sessions.py`), `think_time_s` 0, so
  the recorded timestamps stay the release times whenever the simulated server keeps up;
- `Request tokens` is the whole prompt the model saw. A row whose Request tokens exceed the
  context of the previous row of its session (that row's prompt + its response) is a later
  turn: `parent_request_id` = that row, own prompt = the difference, so the full prompt is
  exactly Request tokens and the history is a shared prefix. Otherwise the conversation was
  cut or restarted: the row starts afresh (no parent, own prompt = Request tokens);
- own prompts get hash ids no other request shares (blocks of 512); zero lengths become 1.

    session s:  row a: Request 69,  Response 62   -> root, prompt 69, context 131
                row b: Request 249, Response 98   -> parent a, own prompt 249 - 131 = 118
                row c: Request 300, Response 20   -> 300 <= 249 + 98: fresh root, prompt 300
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from schedcheck.traces.importers.common import (
    IMPORT_HASH_BLOCK_SIZE,
    ArrivalClock,
    at_least_one,
    csv_rows,
    parse_count,
    parse_number,
    unique_hash_ids,
)
from schedcheck.traces.schema import TraceRequest

REQUIRED = ("Timestamp", "Request tokens", "Response tokens")
SESSION_COLUMN = "Session ID"


@dataclass(frozen=True, slots=True)
class _Turn:
    """The last row of a session: its id and its context (full prompt + response)."""

    request_id: str
    context_length: int


def iter_burstgpt(path: str | os.PathLike[str]) -> Iterator[TraceRequest]:
    """Yield the requests of a BurstGPT CSV, in file order (raises TraceError).

    Memory: the last turn of every session seen (a dict looked up by key, never iterated).
    """
    name = os.fspath(path)
    clock = ArrivalClock(units_per_s=1)
    last_turns: dict[str, _Turn] = {}
    for request_index, (ctx, row) in enumerate(csv_rows(name, REQUIRED)):
        request_id = f"burstgpt-{request_index}"
        arrival_s = clock.arrival_s(
            ctx, "Timestamp", parse_number(ctx, "Timestamp", row["Timestamp"])
        )
        prompt_length = at_least_one(parse_count(ctx, "Request tokens", row["Request tokens"]))
        output_length = at_least_one(parse_count(ctx, "Response tokens", row["Response tokens"]))
        session = row.get(SESSION_COLUMN, "").strip() or None
        parent = None if session is None else last_turns.get(session)
        if parent is not None and prompt_length <= parent.context_length:
            parent = None  # cut or restarted: a fresh root
        own_length = prompt_length - (parent.context_length if parent else 0)
        assert own_length >= 1
        if session is not None:
            last_turns[session] = _Turn(request_id, prompt_length + output_length)
        yield TraceRequest(
            request_id=request_id,
            arrival_time_s=arrival_s,
            output_length=output_length,
            input_length=own_length,
            hash_ids=unique_hash_ids(request_index, own_length),
            hash_block_size=IMPORT_HASH_BLOCK_SIZE,
            session_id=session,
            parent_request_id=parent.request_id if parent else None,
        )
