"""Validate one step's runner metadata against the cache and the true tokens (numpy only).

The tensor executor must survive any metadata a buggy scheduler produces: a slot -1, a
block id past the cache, a block table shorter than the key length, a chunk whose token
ids are not the request's. Each such case becomes a `misalignment` finding here, and the
arrays handed to the kernels are sanitized so nothing reads or writes out of bounds:

    slot_mapping (T,)   row t writes K/V to slot_mapping[t]; -1 = skip the write
                        (invalid slots, and all but the last row writing one slot)
    key_table (B, W)    logical block k of request i -> block id, for every key position
                        j < seq_lens[i] (k = j // block_size, W = max cdiv(seq_len, bs));
                        -1 = missing or out of range (the kernels read a zero block there)
    draft_slots (L,)    speculative decoding: where the drafter writes the draft KV of each
                        lookahead position (metadata.lookahead_*); -1 = skip (invalid)
    rejected_rows (T,)  scheduled draft tokens: True for the draft rows from each request's
                        first non-accepted draft on (drafts.py); they are not findings,
                        their KV is the draft's and their samples are discarded
    sample_rows (S,)    rows whose logits are computed: logits_indices, and every spec row
                        of a request with drafts

Layout of keys for request i (block_size 4, seq_len 10, block_table (7, 2))::

    key position j   0 1 2 3 | 4 5 6 7 | 8 9
    logical block    0       | 1       | 2      <- past the table: block-invalid at j = 8
    key_table[i]     7         2         -1
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.gpu.drafts import rejected_rows, sample_rows
from schedcheck.gpu.findings import Finding, misalignment
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class StepPlan:
    """The sanitized arrays of one step and the findings that sanitizing produced."""

    metadata: RunnerMetadata
    findings: tuple[Finding, ...]
    row_request: IntArray  # (T,) request index of each flattened row
    slot_mapping: IntArray  # (T,) -1 = skip the write
    key_table: IntArray  # (B, W) -1 = read the zero block
    input_ids: IntArray  # (T,) the chunk token ids, invalid ids replaced by 0
    max_block_id: int  # largest valid block id the step touches; -1 if none
    draft_slots: IntArray  # (L,) -1 = skip the draft write
    rejected_rows: npt.NDArray[np.bool_]  # (T,) rejected draft rows (drafts.py)
    sample_rows: IntArray  # (S,) rows whose logits are computed, ascending

    @property
    def step(self) -> int:
        return self.metadata.output.step


def plan_step(
    metadata: RunnerMetadata,
    num_blocks: int,
    tokens: Mapping[str, npt.NDArray[np.int64]],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> StepPlan:
    """Sanitize `metadata` for a cache of `num_blocks` blocks; `tokens`: true sequences.

    Token ids outside [0, vocab_size) (e.g. -1 for a position nothing was sampled at yet)
    are fed as 0; the row is already a finding (input-token, position-beyond-tokens or
    unknown-request), since a true token is always a valid id; a rejected draft row's token
    differs from the true one by design and is no finding."""
    assert num_blocks >= 1 and vocab_size >= 1
    bs = metadata.block_size
    row_request = np.repeat(np.arange(metadata.num_reqs, dtype=np.int64), metadata.query_lens)
    rejected = rejected_rows(metadata, tokens)
    findings: list[Finding] = []
    findings += _token_findings(metadata, tokens, rejected)
    findings += _alignment_findings(metadata)
    slots, slot_findings = _sanitize_slots(metadata, row_request, num_blocks * bs)
    key_table, block_findings = _key_table(metadata, num_blocks)
    draft_slots, draft_findings = _sanitize_draft_slots(metadata, num_blocks * bs)
    valid_blocks = np.concatenate(
        [slots[slots >= 0] // bs, key_table[key_table >= 0], draft_slots[draft_slots >= 0] // bs]
    )
    plan = StepPlan(
        metadata=metadata,
        findings=tuple(findings + slot_findings + block_findings + draft_findings),
        row_request=row_request,
        slot_mapping=slots,
        key_table=key_table,
        input_ids=np.where(
            (metadata.input_ids >= 0) & (metadata.input_ids < vocab_size), metadata.input_ids, 0
        ),
        max_block_id=int(valid_blocks.max()) if valid_blocks.size else -1,
        draft_slots=draft_slots,
        rejected_rows=rejected,
        sample_rows=sample_rows(metadata),
    )
    assert plan.slot_mapping.shape == metadata.positions.shape
    assert plan.max_block_id < num_blocks
    return plan


def _first_rows(mask: npt.NDArray[np.bool_], row_request: IntArray) -> list[tuple[int, int]]:
    """(request index, first True row) for every request that has a True row."""
    rows = np.flatnonzero(mask)
    reqs, first = np.unique(row_request[rows], return_index=True)
    return [(int(i), int(rows[f])) for i, f in zip(reqs, first, strict=True)]


def _token_findings(
    md: RunnerMetadata,
    tokens: Mapping[str, npt.NDArray[np.int64]],
    rejected: npt.NDArray[np.bool_],
) -> list[Finding]:
    """Unknown requests, rows past the known tokens, chunk token ids that are not true;
    rejected draft rows are none of these."""
    step = md.output.step
    out: list[Finding] = []
    for i, rid in enumerate(md.req_ids):
        lo, hi = int(md.query_start_loc[i]), int(md.query_start_loc[i + 1])
        if rid not in tokens:
            message = f"step {step} schedules {rid!r}, which is not known"
            out.append(misalignment("unknown-request", step, rid, int(md.positions[lo]), message))
            continue
        out += _request_token_findings(md, i, tokens[rid], rejected[lo:hi])
    return out


def _request_token_findings(
    md: RunnerMetadata, i: int, true: npt.NDArray[np.int64], rejected: npt.NDArray[np.bool_]
) -> list[Finding]:
    """Request i's rows past its `true` tokens, its wrong chunk tokens, and a seq_len that
    reads past them; its `rejected` draft rows (and the keys only they add) are skipped."""
    step, rid = md.output.step, md.req_ids[i]
    lo, hi = int(md.query_start_loc[i]), int(md.query_start_loc[i + 1])
    positions = md.positions[lo:hi]
    out: list[Finding] = []
    past = (positions >= true.size) & ~rejected
    if past.any():
        j = int(np.flatnonzero(past)[0])
        out.append(
            misalignment(
                "position-beyond-tokens",
                step,
                rid,
                int(positions[j]),
                f"row {lo + j} runs position {int(positions[j])} but {rid!r} has "
                f"{true.size} tokens",
            )
        )
    checked = (positions < true.size) & ~rejected
    wrong = np.zeros_like(past)
    wrong[checked] = md.input_ids[lo:hi][checked] != true[positions[checked]]
    if wrong.any():
        j = int(np.flatnonzero(wrong)[0])
        p = int(positions[j])
        out.append(
            misalignment(
                "input-token",
                step,
                rid,
                p,
                f"chunk token at position {p} is {int(md.input_ids[lo + j])}, true token "
                f"{int(true[p])} ({int(wrong.sum())} wrong in this chunk)",
            )
        )
    seq_len = int(md.seq_lens[i])
    if seq_len - int(rejected.sum()) > true.size and not past.any():
        out.append(
            misalignment(
                "position-beyond-tokens",
                step,
                rid,
                int(true.size),
                f"seq_len {seq_len} reads keys past the {true.size} tokens",
            )
        )
    return out


def _alignment_findings(md: RunnerMetadata) -> list[Finding]:
    """Bottom-right causal: row r of request i sees keys j <= r + seq_len - query_len, which
    is its own position only if seq_len - query_len == positions of its first row.

        chunk positions 4 5 6, seq_len 10 (not 7): row 0 sees keys 0..7, past itself
    """
    first = md.positions[md.query_start_loc[:-1]] if md.num_reqs else md.positions[:0]
    shift = md.seq_lens - md.query_lens - first  # (B,) 0 when aligned
    out = []
    for i in np.flatnonzero(shift).tolist():
        p = int(first[i])
        out.append(
            misalignment(
                "causal-alignment",
                md.output.step,
                md.req_ids[i],
                p,
                f"seq_len {int(md.seq_lens[i])} with {int(md.query_lens[i])} rows from position "
                f"{p}: row 0 sees keys up to {p + int(shift[i])}",
            )
        )
    return out


def _sanitize_slots(
    md: RunnerMetadata, row_request: IntArray, num_slots: int
) -> tuple[IntArray, list[Finding]]:
    """Invalid slots -> -1 with a finding; of rows sharing a slot only the last writes."""
    slots, findings = _invalid_slots(
        md, md.slot_mapping, row_request, md.positions, num_slots, "slot"
    )
    reversed_slots = slots[::-1]
    _, last = np.unique(reversed_slots, return_index=True)
    keep = np.zeros(slots.size, dtype=bool)
    keep[slots.size - 1 - last] = True  # last occurrence of every slot value
    slots[~keep & (slots >= 0)] = -1
    return slots, findings


def _sanitize_draft_slots(md: RunnerMetadata, num_slots: int) -> tuple[IntArray, list[Finding]]:
    """The drafter's lookahead slots; an invalid one (past the block table: vllm#16370) -> -1
    with a finding."""
    return _invalid_slots(
        md,
        md.lookahead_slot_mapping,
        md.lookahead_req,
        md.lookahead_positions,
        num_slots,
        "the drafter's slot",
    )


def _invalid_slots(
    md: RunnerMetadata,
    slot_mapping: IntArray,
    owner: IntArray,
    positions: IntArray,
    num_slots: int,
    what: str,
) -> tuple[IntArray, list[Finding]]:
    """A copy of `slot_mapping` with every slot outside the cache -> -1, and a `slot-invalid`
    finding at the first one of each request (`owner`: batch index of each write)."""
    slots = slot_mapping.astype(np.int64, copy=True)
    bad = (slots < 0) | (slots >= num_slots)
    findings = []
    for i, w in _first_rows(bad, owner):
        slot, position = int(slots[w]), int(positions[w])
        count = int(bad[owner == i].sum())
        findings.append(
            misalignment(
                "slot-invalid",
                md.output.step,
                md.req_ids[i],
                position,
                f"{what} {slot} for position {position} is outside [0, {num_slots}); "
                f"{count} write(s) skipped",
                slot=slot,
                block=slot // md.block_size if slot >= 0 else None,
            )
        )
    slots[bad] = -1
    return slots, findings


def _key_table(md: RunnerMetadata, num_blocks: int) -> tuple[IntArray, list[Finding]]:
    """Block ids covering keys 0 .. seq_len-1 of every request; -1 where invalid."""
    bs = md.block_size
    needed = (md.seq_lens + bs - 1) // bs  # (B,) counts of logical blocks read
    width = int(needed.max()) if needed.size else 0
    table = np.full((md.num_reqs, width), -1, dtype=np.int64)
    findings = []
    for i, req in enumerate(md.output.scheduled):
        n = int(needed[i])
        ids = np.full(n, -1, dtype=np.int64)
        given = np.asarray(md.block_tables[i][:n], dtype=np.int64)
        ids[: given.size] = given
        bad = (ids < 0) | (ids >= num_blocks)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            block = int(ids[k]) if k < given.size else None
            what = (
                "has no entry" if block is None else f"is block {block}, outside [0, {num_blocks})"
            )
            findings.append(
                misalignment(
                    "block-invalid",
                    md.output.step,
                    req.request_id,
                    k * bs,
                    f"logical block {k} (key positions {k * bs}..) {what}; "
                    f"{int(bad.sum())} of {n} blocks read invalid",
                    block=block,
                )
            )
        ids[bad] = -1
        table[i, :n] = ids
    return table, findings
