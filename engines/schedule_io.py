"""The schedule (the sequence of SchedulerOutputs of a run): JSON lines and fingerprint.

The fingerprint is SHA-256 over a canonical binary encoding of every step, so the same
trace + config + seed + code gives the same fingerprint in any process, whatever
PYTHONHASHSEED is. Integers are encoded little-endian int64; strings as UTF-8 with a
length prefix; sequences with a length prefix.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput


class Fingerprint:
    """Incremental SHA-256 of a schedule; feed every step with `update`.

    A block table is encoded as a delta against the same request's table at its previous
    step when that one is a prefix of it (the common case: blocks appended), else whole;
    the encoding stays a pure function of the sequence of steps.
    """

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        # request id -> (its block table as last encoded, its id's UTF-8), while it runs
        self._seen: dict[str, tuple[tuple[int, ...], bytes]] = {}
        self.num_steps = 0

    def update(self, output: SchedulerOutput) -> None:
        seen = self._seen
        ints = [output.step, len(output.scheduled)]
        parts: list[Any] = []  # bytes, and int64 token arrays (bytes-like: joined in place)
        for req in output.scheduled:
            rid = req.request_id
            table = req.block_table
            num_blocks = len(table)
            entry = seen.get(rid)
            if entry is not None and entry[0] is table:  # engines that cache their tuples
                raw_id, keep = entry[1], num_blocks  # O(1) in the common case
            else:
                raw_id, keep = self._new_table(rid, table, entry)
            ints += (
                len(raw_id),
                req.num_computed_tokens,
                req.num_scheduled_tokens,
                req.num_tokens,
                req.num_prompt_tokens,
                req.num_cached_tokens,
                num_blocks,
                keep,
                num_blocks - keep,
            )
            if keep != num_blocks:
                ints += table[keep:]
            if req.spec_token_ids or req.group_block_tables:  # absent: the encoding of old
                ints += _extension_ints(req)
            parts.append(raw_id)
            tokens = req.token_ids
            parts.append(tokens if tokens.dtype is _LE_I64 else _le_bytes(tokens))
        copies = output.block_copies
        ints.append(len(copies))
        for pair in copies:
            ints += pair
        id_lists: tuple[tuple[str, ...], ...] = (
            output.preempted_req_ids,
            output.finished_req_ids,
            output.rejected_req_ids,
        )
        if output.dropped_req_ids:  # absent: the encoding of old (no step dropped one)
            id_lists += (output.dropped_req_ids,)  # preempted too: popped from seen already
        for ids in id_lists:
            ints.append(len(ids))
            for rid in ids:
                raw_id = rid.encode("utf-8")
                ints.append(len(raw_id))
                parts.append(raw_id)
                seen.pop(rid, None)
        # int64 in native order: little-endian on every supported host
        self._sha.update(array("q", ints).tobytes())
        self._sha.update(_joined(parts))
        self.num_steps += 1

    def _new_table(
        self,
        rid: str,
        table: tuple[int, ...],
        entry: tuple[tuple[int, ...], bytes] | None,
    ) -> tuple[bytes, int]:
        """A request's table that is not the one last encoded: (its id's UTF-8, how many
        of its blocks the last one gives: all of it when it is a prefix, else none)."""
        prev: tuple[int, ...] = ()
        if entry is None:
            raw_id = rid.encode("utf-8")
        else:
            prev, raw_id = entry
        is_prefix = len(prev) <= len(table) and table[: len(prev)] == prev
        keep = len(prev) if is_prefix else 0
        self._seen[rid] = (table, raw_id)
        return raw_id, keep

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


_LE_I64 = np.dtype("<i8")  # a chunk's tokens as they are hashed


def _le_bytes(tokens: np.ndarray) -> bytes:
    return tokens.astype(_LE_I64, copy=False).tobytes()


def _joined(parts: list[Any]) -> bytes:
    """The parts' bytes, one after another; a token array is read in place, or through
    tobytes() where it is not contiguous (the same bytes: C order)."""
    try:
        return b"".join(parts)
    except TypeError:  # a strided view of tokens
        return b"".join(p.tobytes() if isinstance(p, np.ndarray) else p for p in parts)


_EXTENSION_MARK = -(1 << 62)  # never a count or a block id: starts the extension


def _extension_ints(req: ScheduledRequest) -> list[int]:
    """Drafts and per-group tables of a request, only when it has any (so the schedules
    of runs without them keep their fingerprints)."""
    out = [_EXTENSION_MARK, len(req.spec_token_ids), *req.spec_token_ids]
    out.append(len(req.group_block_tables))
    for table in req.group_block_tables:
        out.append(len(table))
        out.extend(table)
    return out


def _request_to_json(r: ScheduledRequest) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "request_id": r.request_id,
        "num_computed_tokens": r.num_computed_tokens,
        "num_scheduled_tokens": r.num_scheduled_tokens,
        "num_tokens": r.num_tokens,
        "num_prompt_tokens": r.num_prompt_tokens,
        "num_cached_tokens": r.num_cached_tokens,
        "token_ids": r.token_ids.tolist(),
        "block_table": list(r.block_table),
    }
    if r.spec_token_ids:
        obj["spec_token_ids"] = list(r.spec_token_ids)
    if r.group_block_tables:
        obj["group_block_tables"] = [list(t) for t in r.group_block_tables]
    return obj


def output_to_json(output: SchedulerOutput) -> dict[str, Any]:
    return {
        "step": output.step,
        "scheduled": [_request_to_json(r) for r in output.scheduled],
        "preempted_req_ids": list(output.preempted_req_ids),
        "finished_req_ids": list(output.finished_req_ids),
        "rejected_req_ids": list(output.rejected_req_ids),
        "rejected_reasons": list(output.rejected_reasons),
        "block_copies": [list(pair) for pair in output.block_copies],
        **({"dropped_req_ids": list(output.dropped_req_ids)} if output.dropped_req_ids else {}),
    }


def output_from_json(obj: dict[str, Any]) -> SchedulerOutput:
    scheduled = tuple(
        ScheduledRequest(
            request_id=str(r["request_id"]),
            num_computed_tokens=int(r["num_computed_tokens"]),
            num_scheduled_tokens=int(r["num_scheduled_tokens"]),
            num_tokens=int(r["num_tokens"]),
            num_prompt_tokens=int(r["num_prompt_tokens"]),
            num_cached_tokens=int(r.get("num_cached_tokens", 0)),
            token_ids=_readonly(np.asarray(r["token_ids"], dtype=np.int64)),
            block_table=tuple(int(b) for b in r["block_table"]),
            spec_token_ids=tuple(int(t) for t in r.get("spec_token_ids", ())),
            group_block_tables=tuple(
                tuple(int(b) for b in t) for t in r.get("group_block_tables", ())
            ),
        )
        for r in obj["scheduled"]
    )
    return SchedulerOutput(
        step=int(obj["step"]),
        scheduled=scheduled,
        preempted_req_ids=tuple(obj.get("preempted_req_ids", ())),
        finished_req_ids=tuple(obj.get("finished_req_ids", ())),
        rejected_req_ids=tuple(obj.get("rejected_req_ids", ())),
        rejected_reasons=tuple(obj.get("rejected_reasons", ())),
        block_copies=tuple((int(a), int(b)) for a, b in obj.get("block_copies", ())),
        dropped_req_ids=tuple(obj.get("dropped_req_ids", ())),
    )


def write_schedule(path: str, outputs: Iterable[SchedulerOutput]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for output in outputs:
            fh.write(json.dumps(output_to_json(output), separators=(",", ":")) + "\n")


def read_schedule(path: str) -> Iterator[SchedulerOutput]:
    """The SchedulerOutputs of a JSONL file, or of an xz-compressed one (`.xz`)."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield output_from_json(json.loads(line))


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
