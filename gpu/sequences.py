"""The true token sequence of every request of a bundle: full prompt + recorded outputs.

A pure function of the trace and outputs.json (numpy only). The simulator resolves
conversation turns the same way when it replays a trace; this module has its own copy of
that small rule so that `gpu/` never imports `sim/`:

    turn 1 (no parent):  full_prompt = own tokens
    turn k (parent p):   full_prompt = full_prompt(p) + outputs(p) + own tokens

    true sequence = full_prompt + outputs      (what the baseline runs, in one forward)
    positions       0 ........ P-1 | P ..... P+O-1 | P+O ...
                                                     outputs the bundle did not record (a
                                                     request still running when the run
                                                     stopped): the tokens its schedule first
                                                     fed at those positions (`extend_from`)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from schedcheck.engines.protocol import SchedulerOutput
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE

TokenArray = npt.NDArray[np.int64]


def read_trace(path: str | Path) -> list[TraceRequest]:
    """Read a trace JSONL file (validated by traces/reader.py; raises TraceError)."""
    from schedcheck.traces.reader import read_trace as read_validated

    return list(read_validated(path))


def full_prompts(
    requests: Sequence[TraceRequest],
    outputs: Mapping[str, Sequence[int]],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> dict[str, TokenArray]:
    """request id -> full prompt (parent chain resolved); pure, bounded by len(requests)."""
    by_id = {r.request_id: r for r in requests}
    assert len(by_id) == len(requests), "request ids are unique"
    resolved: dict[str, TokenArray] = {}
    for request in requests:
        _resolve(request.request_id, by_id, outputs, vocab_size, resolved)
    return resolved


def _resolve(
    rid: str,
    by_id: Mapping[str, TraceRequest],
    outputs: Mapping[str, Sequence[int]],
    vocab_size: int,
    resolved: dict[str, TokenArray],
) -> TokenArray:
    chain: list[str] = []  # rid, its parent, ... up to a resolved or parentless request
    cursor: str | None = rid
    for _ in range(len(by_id) + 1):
        if cursor is None or cursor in resolved:
            break
        if cursor not in by_id:
            raise ValueError(f"request {chain[-1]!r}: parent {cursor!r} is not in the trace")
        if cursor in chain:
            raise ValueError(f"request {rid!r}: parent chain has a cycle through {cursor!r}")
        chain.append(cursor)
        cursor = by_id[cursor].parent_request_id
    else:
        raise AssertionError("parent chain longer than the trace")
    for child in reversed(chain):
        parent = by_id[child].parent_request_id
        own = by_id[child].own_prompt_tokens(vocab_size)
        if parent is None:
            resolved[child] = own
        else:
            parent_out = np.asarray(outputs.get(parent, ()), dtype=np.int64)
            resolved[child] = np.concatenate([resolved[parent], parent_out, own])
    return resolved[rid]


def true_sequences(
    requests: Sequence[TraceRequest],
    outputs: Mapping[str, Sequence[int]],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> dict[str, TokenArray]:
    """request id -> full prompt + its own recorded outputs (read-only int64 arrays)."""
    prompts = full_prompts(requests, outputs, vocab_size)
    sequences = {}
    for rid, prompt in prompts.items():
        seq = np.concatenate([prompt, np.asarray(outputs.get(rid, ()), dtype=np.int64)])
        seq.flags.writeable = False
        sequences[rid] = seq
    return sequences


def check_vocab(sequences: Mapping[str, TokenArray], vocab_size: int) -> None:
    """Raise ValueError if a token id is outside [0, vocab_size)."""
    for rid, seq in sequences.items():
        if seq.size and (seq.min() < 0 or seq.max() >= vocab_size):
            raise ValueError(
                f"request {rid!r}: token ids must lie in [0, {vocab_size}), "
                f"found {int(seq.min())}..{int(seq.max())}"
            )


def extend_from_schedule(
    sequences: Mapping[str, TokenArray], schedule: Sequence[SchedulerOutput]
) -> dict[str, TokenArray]:
    """Each sequence extended by the chunk tokens the schedule first feeds right past its
    end, in step order: the outputs of requests whose outputs the bundle did not record.

    Positions inside the known sequence are never changed, so a chunk that feeds a wrong
    token there is still caught (`input-token`)."""
    grown = {rid: list(seq.tolist()) for rid, seq in sequences.items()}
    for output in schedule:
        for req in output.scheduled:
            known = grown.get(req.request_id)
            if known is None:
                continue
            lo, hi = req.num_computed_tokens, req.num_end_tokens
            if lo <= len(known) < hi:
                fed = req.token_ids[len(known) - lo :]
                bad = np.flatnonzero(fed < 0)  # -1: nothing known there, stop
                known.extend(fed[: bad[0] if bad.size else fed.size].tolist())
    out = {}
    for rid, tokens in grown.items():
        seq = np.asarray(tokens, dtype=np.int64)
        seq.flags.writeable = False
        out[rid] = seq
    return out
