"""engines/slots.py: the per-row arrays of a step, built from lists (small steps) or by
compiled passes (long chunks); both give the same int64 arrays, with exact values."""

from __future__ import annotations

import random

import numpy as np
import pytest

from schedcheck.engines import slots
from schedcheck.engines.slots import SMALL_ROWS, gather_slots, rows_of


def _slots_one_by_one(tables, starts, counts, block_size):
    out = []
    for table, start, count in zip(tables, starts, counts, strict=True):
        for p in range(start, start + count):
            index = p // block_size
            block = table[index] if index < len(table) else -1
            out.append(block * block_size + p % block_size if block >= 0 else -1)
    return out


def test_rows_of_decodes_a_small_step_and_a_long_chunk():
    # one row each (decodes)
    positions, row_req = rows_of([4, 9], [1, 1], [0, 1, 2])
    assert (positions.tolist(), row_req.tolist()) == ([4, 9], [0, 1])
    # one chunk
    positions, row_req = rows_of([5], [3], [0, 3])
    assert (positions.tolist(), row_req.tolist()) == ([5, 6, 7], [0, 0, 0])
    assert positions.dtype == row_req.dtype == np.int64
    # a small step: the docstring layout of engines/metadata.py
    positions, row_req = rows_of([4, 9, 8], [3, 1, 2], [0, 3, 4, 6])
    assert positions.tolist() == [4, 5, 6, 9, 8, 9]
    assert row_req.tolist() == [0, 0, 0, 1, 2, 2]
    # past SMALL_ROWS: array operations
    positions, row_req = rows_of([0, 7], [SMALL_ROWS, 2], [0, SMALL_ROWS, SMALL_ROWS + 2])
    assert positions.tolist() == [*range(SMALL_ROWS), 7, 8]
    assert row_req.tolist() == [0] * SMALL_ROWS + [1, 1]
    assert positions.dtype == row_req.dtype == np.int64


def test_a_decode_step_reads_each_slot_through_its_table():
    # block size 4: position 9 of [3, 5, 1] is entry 2 (block 1) offset 1; position 2 of [7]: 7*4+2
    slots_of = gather_slots([(3, 5, 1), (7,)], [9, 2], [1, 1], 4)
    assert slots_of.dtype == np.int64
    assert slots_of.tolist() == [5, 30]


@pytest.mark.parametrize("count", [3, SMALL_ROWS + 3])
def test_past_the_table_and_a_negative_entry_give_minus_one_both_ways(count):
    """A small step (lists) and a long one (arrays): a position past its table's end, and
    one in a block whose entry is negative, each get slot -1."""
    tables = [(5,), (-1, 2)]
    got = gather_slots(tables, [3, 0], [count, 6], 4).tolist()
    assert got[:3] == [23, -1, -1]  # position 3 of block 5; then past the one-block table
    assert got[count:] == [-1, -1, -1, -1, 8, 9]  # block -1, then block 2


def test_lists_and_arrays_agree_at_every_size_around_the_threshold(monkeypatch):
    rng = random.Random(1)
    for _ in range(300):  # bounded: random cases
        tables, starts, counts, block_size = _random_case(rng, (1, 5), [1, 4, 16], 60, 9, 150)
        want = _slots_one_by_one(tables, starts, counts, block_size)
        assert gather_slots(tables, starts, counts, block_size).tolist() == want
        listed = slots._slots_listed(tables, starts, counts, block_size)
        assert np.asarray(listed).tolist() == want
        monkeypatch.setattr(slots, "SMALL_ROWS", 0)  # every step by the compiled passes
        assert gather_slots(tables, starts, counts, block_size).tolist() == want
        monkeypatch.setattr(slots, "SMALL_ROWS", SMALL_ROWS)


def test_one_request_gives_the_slots_position_by_position_gives():
    """One request's rows (its own path: one block, several, past the table, a negative
    entry), against the slots named position by position."""
    rng = random.Random(2)
    num_by_blocks = 0
    for _ in range(300):  # bounded: random cases
        tables, starts, counts, block_size = _random_case(rng, (1, 1), [1, 4, 16], 60, 40, 30)
        want = _slots_one_by_one(tables, starts, counts, block_size)
        got = gather_slots(tables, starts, counts, block_size)
        assert got.dtype == np.int64 and got.tolist() == want
        by_blocks = slots._slots_of_one(tables[0], starts[0], counts[0], block_size)
        num_by_blocks += by_blocks is not None
    assert num_by_blocks > 100  # the path compared (the rest: past a table, an entry -1)
    assert gather_slots([(3, 5, 1)], [5], [6], 4).tolist() == [21, 22, 23, 4, 5, 6]
    assert gather_slots([(3, 5, 1)], [9], [1], 4).tolist() == [5]
    assert gather_slots([(3,)], [2], [4], 4).tolist() == [14, 15, -1, -1]  # past the table
    long = [tuple(range(40, 10, -1))]  # past SMALL_ROWS rows: by arrays, not ranges
    want = _slots_one_by_one(long, [3], [slots.SMALL_ROWS + 7], 4)
    assert gather_slots(long, [3], [slots.SMALL_ROWS + 7], 4).tolist() == want


def test_build_metadata_of_a_long_chunk_beside_a_decode():
    """A 70-token chunk (past SMALL_ROWS: array operations) beside one decode, block size 16:
    exact positions, slots, query starts, sequence lengths and logits rows."""
    from schedcheck.engines.metadata import build_metadata
    from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput

    chunk = ScheduledRequest("p", 10, 70, 100, 100, np.arange(10, 80), (4, 9, 2, 7, 5))
    decode = ScheduledRequest("d", 33, 1, 34, 20, np.array([7]), (1, 3, 6))
    meta = build_metadata(SchedulerOutput(3, (chunk, decode)), 16)
    assert meta.positions.tolist() == [*range(10, 80), 33]
    assert meta.row_req.tolist() == [0] * 70 + [1]
    assert meta.query_start_loc.tolist() == [0, 70, 71]
    assert meta.seq_lens.tolist() == [80, 34]
    assert meta.num_computed_tokens.tolist() == [10, 33]
    want = [4 * 16 + p for p in range(10, 16)] + [9 * 16 + p for p in range(16)]
    want += [2 * 16 + p for p in range(16)] + [7 * 16 + p for p in range(16)]
    want += [5 * 16 + p for p in range(16)] + [6 * 16 + 1]
    assert meta.slot_mapping.tolist() == want
    assert meta.logits_indices.tolist() == [70]  # the chunk does not reach its 100 tokens
    assert meta.sampling_req_ids == ("d",)
    assert meta.input_ids.tolist() == [*range(10, 80), 7]
    assert meta.num_draft_tokens.size == 0


def test_gather_slots_names_each_positions_slot_and_minus_one_past_the_table():
    rng = random.Random(0)
    for _ in range(500):  # bounded: random cases
        tables, starts, counts, block_size = _random_case(rng, (0, 6), [1, 2, 16], 50, 8, 140)
        got = gather_slots(tables, starts, counts, block_size)
        assert got.dtype == np.int64
        assert got.tolist() == _slots_one_by_one(tables, starts, counts, block_size)


def _random_case(
    rng: random.Random,
    num_reqs: tuple[int, int],
    block_sizes: list[int],
    max_block: int,
    max_table_len: int,
    max_start: int,
) -> tuple[list[tuple[int, ...]], list[int], list[int], int]:
    """Random block tables (entries from -1: past-the-pool ids too), chunk starts and counts
    of 1-40 rows, and a block size; drawn in this order, so a seed gives the same case."""
    n, block_size = rng.randint(*num_reqs), rng.choice(block_sizes)
    tables = [
        tuple(rng.randrange(-1, max_block) for _ in range(rng.randint(0, max_table_len)))
        for _ in range(n)
    ]
    starts = [rng.randint(0, max_start) for _ in range(n)]
    counts = [rng.randint(1, 40) for _ in range(n)]
    return tables, starts, counts, block_size
