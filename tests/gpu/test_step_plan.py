"""The step plan: bad metadata becomes findings and sanitized arrays, never a crash."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.gpu.step_plan import plan_step

BS = 4
TOKENS = {"A": np.arange(10, 20, dtype=np.int64), "B": np.arange(30, 36, dtype=np.int64)}


def _req(rid: str, computed: int, scheduled: int, table: tuple[int, ...]) -> ScheduledRequest:
    ids = TOKENS[rid][computed : computed + scheduled]
    return ScheduledRequest(rid, computed, scheduled, computed + scheduled, 6, ids, table)


def _plan(*reqs: ScheduledRequest, num_blocks: int = 16, tokens=TOKENS):
    md = build_metadata(SchedulerOutput(3, reqs), BS)
    return plan_step(md, num_blocks, tokens)


def test_clean_step_has_no_findings() -> None:
    plan = _plan(_req("A", 4, 3, (5, 6)), _req("B", 5, 1, (1, 2)))
    assert plan.findings == ()
    assert plan.slot_mapping.tolist() == [24, 25, 26, 9]
    assert plan.key_table.tolist() == [[5, 6], [1, 2]]
    assert plan.max_block_id == 6


def test_block_past_the_table_and_out_of_range() -> None:
    plan = _plan(_req("A", 4, 3, (5,)), _req("B", 0, 6, (1, 99)))
    kinds = {(f.kind, f.request_id, f.position, f.block) for f in plan.findings}
    assert ("block-invalid", "A", 4, None) in kinds  # logical block 1 has no entry
    assert ("block-invalid", "B", 4, 99) in kinds
    assert ("slot-invalid", "B", 4, 99) in kinds
    assert plan.slot_mapping.tolist()[:3] == [-1, -1, -1]  # A's rows: no block, no write
    assert plan.key_table.tolist() == [[5, -1], [1, -1]]


def test_duplicate_slots_keep_the_last_writer() -> None:
    plan = _plan(_req("A", 0, 2, (3,)), _req("B", 0, 2, (3,)))
    assert plan.slot_mapping.tolist() == [-1, -1, 12, 13]
    assert plan.findings == ()


def test_wrong_tokens_unknown_requests_and_long_seq_lens() -> None:
    wrong = replace(_req("A", 4, 3, (5, 6)), token_ids=np.array([14, 99, 16], dtype=np.int64))
    plan = _plan(wrong, _req("B", 5, 1, (1, 2)), tokens={"A": TOKENS["A"]})
    found = {(f.kind, f.request_id, f.position) for f in plan.findings}
    assert found == {("input-token", "A", 5), ("unknown-request", "B", 5)}
    short = {"A": TOKENS["A"][:6], "B": TOKENS["B"]}
    plan = _plan(_req("A", 4, 3, (5, 6)), tokens=short)
    assert [(f.kind, f.position) for f in plan.findings] == [("position-beyond-tokens", 6)]


def test_negative_slot_from_the_runner_is_a_finding() -> None:
    md = build_metadata(SchedulerOutput(0, (_req("A", 0, 3, (2,)),)), BS)
    md.slot_mapping[1] = -1  # what metadata.py emits past a block table
    plan = plan_step(md, 16, TOKENS)
    assert [(f.kind, f.position, f.slot) for f in plan.findings] == [("slot-invalid", 1, -1)]
    assert plan.slot_mapping.tolist() == [8, -1, 10]


def test_draft_slots_past_the_table_become_findings_and_skipped_writes() -> None:
    """B samples after position 5 (end 6, block size 4): with 3 drafts, positions 6, 7 lie in
    its block 2 and position 8 past its table; A's chunk samples nothing, so drafts nothing."""
    a = replace(_req("A", 4, 3, (5, 6)), num_tokens=10)  # a chunk: it does not sample
    step = SchedulerOutput(3, (a, _req("B", 5, 1, (1, 2))))
    md = build_metadata(step, BS, num_lookahead_tokens=3)
    plan = plan_step(md, 16, TOKENS)
    assert plan.draft_slots.tolist() == [10, 11, -1]
    assert [(f.kind, f.request_id, f.position, f.slot) for f in plan.findings] == [
        ("slot-invalid", "B", 8, -1)
    ]
    assert plan.max_block_id == 6
    assert _plan(_req("B", 5, 1, (1, 2))).draft_slots.size == 0  # no speculative decoding


def _with_drafts(
    rid: str, computed: int, num_tokens: int, drafts: tuple[int, ...], table: tuple[int, ...]
) -> ScheduledRequest:
    """Rows [computed, num_tokens) of the true tokens, then the drafts (3: rows 4 5 6 7)."""
    ids = np.concatenate([TOKENS[rid][computed:num_tokens], np.asarray(drafts, np.int64)])
    return ScheduledRequest(
        rid, computed, ids.size, num_tokens, 4, ids, table, spec_token_ids=drafts
    )


def test_rejected_drafts_are_no_findings_and_every_spec_row_samples() -> None:
    """A knows tokens 10..14 (positions 0..4) and runs drafts 15 99 17 at positions 5 6 7:
    15 is true (accepted); 99 is not (rejected), and so is 17 after it, though true."""
    a = _with_drafts("A", 4, 5, (15, 99, 17), (5, 6))
    plan = _plan(_req("B", 5, 1, (1, 2)), a)
    assert plan.findings == ()
    assert plan.rejected_rows.tolist() == [False, False, False, True, True]
    assert plan.sample_rows.tolist() == [0, 1, 2, 3, 4]  # B's, and A's rows 4..7
    assert plan.metadata.logits_indices.tolist() == [0, 4]


def test_drafts_past_the_true_tokens_are_rejected_and_wrong_rows_still_found() -> None:
    """With 7 true tokens, draft row 7 (and the seq_len 8 it adds) is past them; a wrong
    token in a non-draft row is an input-token finding as without drafts."""
    short = {"A": TOKENS["A"][:7]}
    plan = _plan(_with_drafts("A", 4, 5, (15, 16, 17), (5, 6)), tokens=short)
    assert plan.findings == ()
    assert plan.rejected_rows.tolist() == [False, False, False, True]
    wrong = replace(
        _with_drafts("A", 4, 5, (15, 16, 17), (5, 6)),
        token_ids=np.array([99, 15, 16, 17], dtype=np.int64),
    )
    plan = _plan(wrong, tokens=short)
    assert [(f.kind, f.position, f.message) for f in plan.findings] == [
        ("input-token", 4, "chunk token at position 4 is 99, true token 14 (1 wrong in this chunk)")
    ]
    assert plan.rejected_rows.tolist() == [False, False, False, True]
