"""Runner metadata: exact arrays for the layout drawn in engines/metadata.py's docstring."""

import dataclasses

import numpy as np
import pytest

from schedcheck.engines.metadata import (
    RunnerMetadata,
    _runner_metadata,
    build_metadata,
    gather_slots,
)
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.engines.reference.mutants import apply_runner_mutant


def _req(rid, ncomp, nsched, ntok, table):
    tokens = np.arange(ncomp, ncomp + nsched, dtype=np.int64)
    return ScheduledRequest(rid, ncomp, nsched, ntok, ntok, tokens, tuple(table))


def _docstring_step():
    return SchedulerOutput(
        0,
        (
            _req("A", 4, 3, 10, [7, 2]),
            _req("B", 9, 1, 10, [3, 5, 1]),
            _req("C", 8, 2, 10, [4, 6, 8]),
        ),
    )


def test_docstring_layout():
    m = build_metadata(_docstring_step(), block_size=4)
    assert m.positions.tolist() == [4, 5, 6, 9, 8, 9]
    assert m.query_start_loc.tolist() == [0, 3, 4, 6]
    assert m.seq_lens.tolist() == [7, 10, 10]
    assert m.slot_mapping.tolist() == [8, 9, 10, 5, 32, 33]
    assert m.logits_indices.tolist() == [3, 5]
    assert m.sampling_req_ids == ("B", "C")
    assert m.row_req.tolist() == [0, 0, 0, 1, 2, 2]
    assert m.block_table_array.tolist() == [[7, 2, -1], [3, 5, 1], [4, 6, 8]]


def test_position_past_block_table_gets_slot_minus_one():
    slots = gather_slots([(5,)], [3], [3], block_size=4)
    assert slots.tolist() == [23, -1, -1]


def test_runner_mutants_change_exactly_their_field():
    clean = build_metadata(_docstring_step(), 4)
    long = apply_runner_mutant(build_metadata(_docstring_step(), 4), "seq-len-full-prompt")
    assert long.seq_lens.tolist() == [10, 10, 10]
    assert long.slot_mapping.tolist() == clean.slot_mapping.tolist()
    zero = apply_runner_mutant(build_metadata(_docstring_step(), 4), "slot-mapping-from-zero")
    assert zero.slot_mapping.tolist() == [28, 29, 30, 12, 16, 17]
    assert zero.seq_lens.tolist() == clean.seq_lens.tolist()


def test_runner_mutant_block_table_hits_only():
    """vllm#7018's example: a prompt that misses the cache beside one that hits reads
    through [0, 0]; the slot mapping (from the scheduled tables) is unchanged."""
    step = SchedulerOutput(0, (_req("A", 0, 6, 6, [3, 4]), _req("B", 4, 4, 8, [1, 2])))
    clean = build_metadata(step, 4)
    hits = apply_runner_mutant(build_metadata(step, 4), "block-table-hits-only")
    assert clean.block_tables == ((3, 4), (1, 2)) and clean.as_documented
    assert hits.block_tables == ((0, 0), (1, 2)) and not hits.as_documented
    assert hits.block_table_array.tolist() == [[0, 0], [1, 2]]
    assert hits.slot_mapping.tolist() == clean.slot_mapping.tolist() == [12, 13, 14, 15, 16, 17,
                                                                       8, 9, 10, 11]  # fmt: skip
    alone = SchedulerOutput(0, (_req("A", 0, 6, 6, [3, 4]),))  # nobody reads paged KV
    assert apply_runner_mutant(build_metadata(alone, 4), "block-table-hits-only").as_documented


def test_lookahead_slots_of_the_docstring_layout():
    """B (decode, end 10) and C (last chunk, end 10) sample; A does not draft. B's table
    covers 12 tokens, C's too: the third draft of each has no slot."""
    m = build_metadata(_docstring_step(), 4, num_lookahead_tokens=3)
    assert m.lookahead_positions.tolist() == [10, 11, 12, 10, 11, 12]
    assert m.lookahead_slot_mapping.tolist() == [6, 7, -1, 34, 35, -1]
    assert m.lookahead_req.tolist() == [1, 1, 1, 2, 2, 2]


def test_lookahead_capped_at_max_model_len_and_off_by_default():
    assert build_metadata(_docstring_step(), 4).lookahead_slot_mapping.size == 0
    capped = build_metadata(_docstring_step(), 4, num_lookahead_tokens=3, max_model_len=11)
    assert capped.lookahead_positions.tolist() == [10, 10]
    assert capped.lookahead_slot_mapping.tolist() == [6, 34]
    none_left = build_metadata(_docstring_step(), 4, num_lookahead_tokens=3, max_model_len=10)
    assert none_left.lookahead_req.size == 0


def test_spec_rows_are_each_drafting_requests_last_rows_within_its_chunk():
    """A's 2 drafts: its last 3 rows; B none; C's 4 drafts in a chunk of 2: both its rows."""
    import dataclasses

    m = build_metadata(_docstring_step(), block_size=4)
    assert m.spec_rows.size == 0  # no drafts in the step
    drafted = dataclasses.replace(m, num_draft_tokens=np.array([2, 0, 4], dtype=np.int64))
    assert drafted.spec_rows.tolist() == [0, 1, 2, 4, 5]
    assert drafted.spec_rows.dtype == np.int64
    one = dataclasses.replace(m, num_draft_tokens=np.array([1, 0, 0], dtype=np.int64))
    assert one.spec_rows.tolist() == [1, 2]


def test_batch_mask_marks_the_given_requests_and_through_row_req_their_rows():
    m = build_metadata(_docstring_step(), block_size=4)
    assert m.batch_mask({2, 0}).tolist() == [True, False, True]
    assert m.batch_mask(set()).tolist() == [False, False, False]
    assert m.batch_mask({1})[m.row_req].tolist() == [False, False, False, True, False, False]


def test_built_metadata_equals_the_dataclass_built_from_the_same_fields():
    """build_metadata skips the frozen __init__: the same fields and defaults, still frozen."""
    m = build_metadata(_docstring_step(), block_size=4)
    values = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "kv_groups"}
    again = RunnerMetadata(**values)
    assert [getattr(m, f.name) is getattr(again, f.name) for f in dataclasses.fields(m)] == [
        True
    ] * len(dataclasses.fields(m))
    assert type(m) is RunnerMetadata and repr(m) == repr(again)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.block_size = 8  # type: ignore[misc]
    with pytest.raises(AssertionError, match="positions"):
        _runner_metadata(**{k: v for k, v in values.items() if k != "positions"})
    with pytest.raises(AssertionError, match="typo"):
        _runner_metadata(**values, typo=1)
