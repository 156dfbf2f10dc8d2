"""The engine protocol at the boundary: what an engine returns is well formed before anything
is derived from it.

An engine written by someone else can return data the harness cannot even read: a chunk
whose token ids disagree with its counts, a request id it was never given, a negative
count. Such an output is a `protocol.*` violation naming the field and the values, checked
before the accounting, the runner metadata and the shadow KV see the output (they assume
it well formed). Properties, each step:

- unknown-request: every id an output names (scheduled, preempted, finished, rejected)
  was added to the engine;
- not-live: a scheduled request is live (added, not finished, aborted or rejected);
- duplicate: no request is scheduled twice in one step;
- scheduled-and-finished: no scheduled request is also listed finished or rejected;
- counts: num_computed_tokens >= 0, num_scheduled_tokens >= 1, num_cached_tokens >= 0,
  1 <= num_prompt_tokens <= num_tokens;
- chunk-length: token_ids is a 1-D integer array of exactly num_scheduled_tokens ids::

      token_ids:  | t[num_computed_tokens] ... t[num_computed_tokens + num_scheduled - 1] |
                  |<------------------ num_scheduled_tokens ids ------------------------>|

- block-id: every block id of a block table or a block copy is in [0, num_gpu_blocks);
- rejected-reasons: one reason per rejected id.

After `update_from_output`: every FinishedRequest names a request that was added, once.
When the engine says it has no unfinished request: none it was given is left unreported
(lost-request; a later turn would otherwise wait for its parent forever).

Bounds on values (a chunk past num_tokens, a full hit that computes nothing, a short block
table) are the accounting's (`accounting.range`, `.full-hit-cap`, `.block-table-short`):
the harness reads such outputs safely, and the shadow KV shows what they would read.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

import numpy as np

from schedcheck.engines.protocol import FinishedRequest, ScheduledRequest, SchedulerOutput
from schedcheck.invariants.violation import Violation


class ProtocolChecker:
    """Checks each output against the requests the engine was given.

    Block tables only grow between a request's (re)admissions, so each step checks the
    block ids past those it checked before (the whole table after a preemption)."""

    def __init__(self, num_gpu_blocks: int) -> None:
        assert num_gpu_blocks >= 1
        self.num_gpu_blocks = num_gpu_blocks
        self.checked_blocks: dict[str, int] = {}  # request id -> table prefix checked

    def check_output(
        self, output: SchedulerOutput, live: Container[str], retired: Container[str]
    ) -> list[Violation]:
        """`live`: added and not retired; `retired`: finished, aborted or rejected."""
        step = output.step
        out: list[Violation] = []
        for rid in output.preempted_req_ids:
            self.checked_blocks.pop(rid, None)
        named = (
            ("preempted_req_ids", output.preempted_req_ids),
            ("finished_req_ids", output.finished_req_ids),
            ("rejected_req_ids", output.rejected_req_ids),
        )
        for field, ids in named:
            for rid in ids:
                if rid not in live and rid not in retired:
                    out.append(_unknown(step, rid, field))
        if len(output.rejected_reasons) != len(output.rejected_req_ids):
            out.append(
                Violation(
                    "protocol.rejected-reasons",
                    step,
                    f"{len(output.rejected_req_ids)} rejected ids, "
                    f"{len(output.rejected_reasons)} rejected_reasons",
                )
            )
        out += self._check_copies(step, output.block_copies)
        for rid in output.dropped_req_ids:  # only a preemption drops a step in flight
            if rid not in output.preempted_req_ids:
                message = "dropped_req_ids names it, but preempted_req_ids does not"
                out.append(_bad("protocol.dropped", step, rid, message))
        ended = set(output.finished_req_ids) | set(output.rejected_req_ids)
        seen: set[str] = set()
        checked = self.checked_blocks
        for req in output.scheduled:
            rid = req.request_id
            if (  # the common case inline: well formed, live, once, and no new block id
                _well_formed(req)
                and rid in live
                and rid not in seen
                and rid not in ended
                and checked.get(rid, 0) == len(req.block_table)
            ):
                seen.add(rid)
                continue
            out += self._check_request(step, req, live, retired, seen, ended)
        return out

    def _check_request(
        self,
        step: int,
        req: ScheduledRequest,
        live: Container[str],
        retired: Container[str],
        seen: set[str],
        ended: set[str],
    ) -> list[Violation]:
        rid = req.request_id
        if _well_formed(req) and rid in live and rid not in seen and rid not in ended:
            seen.add(rid)  # the common case, every property at once
            return self._check_table(step, req)
        out: list[Violation] = []
        if rid not in live:
            if rid in retired:
                out.append(_bad("protocol.not-live", step, rid, "scheduled after it ended"))
            else:
                out.append(_unknown(step, rid, "scheduled"))
        if rid in seen:
            out.append(_bad("protocol.duplicate", step, rid, "scheduled twice in one step"))
        seen.add(rid)
        if rid in ended:
            out.append(
                _bad(
                    "protocol.scheduled-and-finished",
                    step,
                    rid,
                    "scheduled and listed finished or rejected in the same output",
                )
            )
        out += _check_counts(step, req)
        out += _check_chunk(step, req)
        out += self._check_table(step, req)
        return out

    def _check_table(self, step: int, req: ScheduledRequest) -> list[Violation]:
        table = req.block_table
        start = self.checked_blocks.get(req.request_id, 0)
        if start > len(table):  # a new, shorter table: check it whole
            start = 0
        new = table[start:]
        self.checked_blocks[req.request_id] = len(table)
        if not new or (min(new) >= 0 and max(new) < self.num_gpu_blocks):
            return []
        index = start + next(i for i, b in enumerate(new) if not 0 <= b < self.num_gpu_blocks)
        return [
            Violation(
                "protocol.block-id",
                step,
                f"block_table[{index}] is {table[index]}, outside the "
                f"{self.num_gpu_blocks} blocks (0..{self.num_gpu_blocks - 1})",
                request_id=req.request_id,
                block=int(table[index]),
                expected=f"0 <= block id < {self.num_gpu_blocks}",
                found=str(table[index]),
            )
        ]

    def _check_copies(self, step: int, copies: Sequence[tuple[int, int]]) -> list[Violation]:
        n = self.num_gpu_blocks
        for src, dst in copies:
            if not (0 <= src < n and 0 <= dst < n):
                return [
                    Violation(
                        "protocol.block-id",
                        step,
                        f"block copy {src} -> {dst} names a block outside 0..{n - 1}",
                        expected=f"0 <= block id < {n}",
                        found=f"{src} -> {dst}",
                    )
                ]
        return []

    def check_finished(
        self,
        step: int,
        finished: Sequence[FinishedRequest],
        live: Container[str],
        retired: Container[str],
    ) -> list[Violation]:
        """What update_from_output returned: requests the engine was given, each once."""
        out: list[Violation] = []
        seen: set[str] = set()
        for f in finished:
            rid = f.request_id
            if rid not in live and rid not in retired:
                out.append(_unknown(step, rid, "update_from_output's finished list"))
            elif rid in seen:
                out.append(_bad("protocol.duplicate", step, rid, "reported finished twice"))
            seen.add(rid)
        return out

    def forget(self, request_id: str) -> None:
        self.checked_blocks.pop(request_id, None)


def check_not_lost(step: int, live: Sequence[str], waiting: dict[str, str]) -> list[Violation]:
    """The engine says it has no unfinished request: `live` (added, never reported finished,
    aborted or rejected) must be empty. `waiting`: later turn -> the parent it waits for."""
    out = []
    for rid in live:
        turns = sorted(turn for turn, parent in waiting.items() if parent == rid)
        waits = f"; later turn(s) {', '.join(turns)} wait for it" if turns else ""
        out.append(
            _bad(
                "protocol.lost-request",
                step,
                rid,
                "has_unfinished_requests() is False, but the request was never reported "
                f"finished, aborted or rejected{waits}",
            )
        )
    return out


def _well_formed(req: ScheduledRequest) -> bool:
    ids = req.token_ids
    return (
        type(req.num_computed_tokens) is int
        and type(req.num_scheduled_tokens) is int
        and type(req.num_cached_tokens) is int
        and type(req.num_tokens) is int
        and type(req.num_prompt_tokens) is int
        and req.num_computed_tokens >= 0
        and req.num_scheduled_tokens >= 1
        and req.num_cached_tokens >= 0
        and 1 <= req.num_prompt_tokens <= req.num_tokens
        and type(ids) is np.ndarray
        and ids.ndim == 1
        and ids.size == req.num_scheduled_tokens
        and ids.dtype.kind in "iu"
    )


def _check_counts(step: int, req: ScheduledRequest) -> list[Violation]:
    counts = (
        ("num_computed_tokens", req.num_computed_tokens, 0),
        ("num_scheduled_tokens", req.num_scheduled_tokens, 1),
        ("num_cached_tokens", req.num_cached_tokens, 0),
        ("num_prompt_tokens", req.num_prompt_tokens, 1),
    )
    out = []
    for name, value, least in counts:
        if not isinstance(value, int | np.integer) or value < least:
            out.append(
                _bad(
                    "protocol.counts",
                    step,
                    req.request_id,
                    f"{name} is {value!r}, must be an integer >= {least}",
                    expected=f">= {least}",
                    found=repr(value),
                )
            )
    if not isinstance(req.num_tokens, int | np.integer) or req.num_tokens < req.num_prompt_tokens:
        out.append(
            _bad(
                "protocol.counts",
                step,
                req.request_id,
                f"num_tokens is {req.num_tokens!r}, less than num_prompt_tokens "
                f"{req.num_prompt_tokens!r}",
            )
        )
    return out


def _check_chunk(step: int, req: ScheduledRequest) -> list[Violation]:
    ids = req.token_ids
    if not isinstance(ids, np.ndarray) or ids.ndim != 1 or ids.dtype.kind not in "iu":
        what = type(ids).__name__
        if isinstance(ids, np.ndarray):
            what = f"a {ids.ndim}-D {ids.dtype} array"
        return [
            _bad(
                "protocol.chunk-length",
                step,
                req.request_id,
                f"token_ids is {what}, must be a 1-D integer array",
            )
        ]
    if ids.size == req.num_scheduled_tokens:
        return []
    return [
        _bad(
            "protocol.chunk-length",
            step,
            req.request_id,
            f"token_ids holds {ids.size} ids, num_scheduled_tokens is "
            f"{req.num_scheduled_tokens} (num_computed_tokens {req.num_computed_tokens})",
            position=max(0, int(req.num_computed_tokens)),
            expected=f"{req.num_scheduled_tokens} ids",
            found=f"{ids.size} ids",
        )
    ]


def _unknown(step: int, request_id: str, where: str) -> Violation:
    return _bad(
        "protocol.unknown-request", step, request_id, f"{where} names a request never added"
    )


def _bad(invariant: str, step: int, request_id: str, message: str, **kw: Any) -> Violation:
    return Violation(invariant, step, message, request_id=request_id, **kw)
