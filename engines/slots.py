"""The per-row arrays of a step's runner metadata (engines/metadata.py): each row's
position and request, and the KV slot of a range of positions through a block table.

Built two ways, picked by size: up to SMALL_ROWS rows from lists, each pass in C (map,
chain), where numpy's per-call cost (about 1 us) is above Python's per-row cost; above it
in one compiled pass each (slot_kernel.py). A step of one request (most steps of a fuzz
example) takes the slots of the blocks its rows touch, block by block. All give the same
int64 arrays (tests/sim/test_slots.py)::

    position p of request i -> block_tables[i][p // block_size] * block_size
                               + p % block_size      (-1 past the table's end)
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
# up to this many rows (or slots), a step's per-row arrays are built from lists. Whole
# build_metadata, side by side (load 4-9): one decode 65 -> 21 us, 20 decodes 87 -> 29 us,
# 33 requests with 4,463 tokens 155 -> 139 us, two 4,096-token chunks 149 -> 95 us
SMALL_ROWS = 64


def rows_of(computed: list[int], counts: list[int], starts: list[int]) -> tuple[IntArray, IntArray]:
    """(positions, row_req) of the flattened rows: request i's rows are positions
    computed[i] .. computed[i] + counts[i] - 1, each of batch index i. One row per request
    (decodes) and small steps are read from lists; a long chunk by array operations (numpy's
    per-call cost is above Python's per-row cost below SMALL_ROWS rows)."""
    num_reqs, num_rows = len(counts), starts[-1]
    if num_rows == num_reqs:  # one row each
        return np.array(computed, dtype=np.int64), np.arange(num_reqs, dtype=np.int64)
    if num_reqs == 1:  # one chunk
        first = computed[0]
        return np.arange(first, first + num_rows, dtype=np.int64), np.zeros(num_rows, np.int64)
    if num_rows <= SMALL_ROWS:
        ends = map(operator.add, computed, counts)
        position_iter = itertools.chain.from_iterable(map(range, computed, ends))
        row_iter = itertools.chain.from_iterable(map(itertools.repeat, range(num_reqs), counts))
        return (
            np.fromiter(position_iter, np.int64, num_rows),
            np.fromiter(row_iter, np.int64, num_rows),
        )
    from schedcheck.engines import slot_kernel  # numba: with the first long step

    return slot_kernel.rows(np.array(computed, np.int64), np.array(counts, np.int64), num_rows)


def gather_slots(
    block_tables: Sequence[tuple[int, ...]],
    starts: Sequence[int],
    counts: Sequence[int],
    block_size: int,
) -> IntArray:
    """Slots of the positions [starts[i], starts[i] + counts[i]) of each request i, concatenated,
    through its block table::

        position p of request i -> block_tables[i][p // block_size] * block_size
                                   + p % block_size

    Only the block-table entries the ranges touch are gathered. A position whose logical
    block lies past the end of its block table gets slot -1 (an out-of-bounds access).
    Every count is >= 1.
    """
    num_reqs = len(block_tables)
    assert len(starts) == len(counts) == num_reqs
    assert min(starts, default=0) >= 0 and min(counts, default=1) >= 1
    if num_reqs == 1:  # most steps of a small run: one request, its slots run by block
        one = _slots_of_one(block_tables[0], starts[0], counts[0], block_size)
        if one is not None:
            return one
    if sum(counts) <= SMALL_ROWS:
        return np.asarray(_slots_listed(block_tables, starts, counts, block_size), np.int64)
    from schedcheck.engines import slot_kernel  # numba: with the first long step

    starts_arr = np.array(starts, dtype=np.int64)
    counts_arr = np.array(counts, dtype=np.int64)
    first_blocks, num_touched = slot_kernel.touched(starts_arr, counts_arr, block_size)
    flat = touched_entries(block_tables, first_blocks.tolist(), num_touched.tolist())
    return slot_kernel.slots(flat, starts_arr, counts_arr, block_size)


def _slots_of_one(
    table: tuple[int, ...], start: int, count: int, block_size: int
) -> IntArray | None:
    """gather_slots of one request: positions [start, start + count) lie in consecutive
    offsets of the blocks they touch, so the slots are those blocks' slots from `start`'s
    offset on (one block: a range). None where a position lies past the table or in a
    block whose entry is negative (rare: the caller goes position by position)."""
    first, last = start // block_size, (start + count - 1) // block_size
    entries = table[first : last + 1]
    if len(entries) <= last - first or min(entries) < 0:
        return None
    offset = start - first * block_size
    if first == last:
        slot = entries[0] * block_size + offset
        return np.arange(slot, slot + count, dtype=np.int64)
    if count <= SMALL_ROWS:  # a run per block, from ranges: one numpy call, not four
        runs = _block_runs(entries, first, start, start + count, block_size)
        return np.fromiter(itertools.chain.from_iterable(runs), np.int64, count)
    from schedcheck.engines import slot_kernel  # numba: with the first long step

    one = np.array([start], np.int64), np.array([count], np.int64)
    return slot_kernel.slots(np.array(entries, np.int64), *one, block_size)


def _block_runs(
    entries: Sequence[int], first: int, start: int, end: int, block_size: int
) -> Iterator[range]:
    """The slots of positions [start, end), one range per block they touch (`entries[j]`:
    the entry of logical block first + j, all of them >= 0)."""
    lo = start
    for k, block in enumerate(entries, first):  # bounded: the blocks it touches
        hi = min(end, (k + 1) * block_size)
        shift = (block - k) * block_size  # position p of logical block k -> p + shift
        yield range(lo + shift, hi + shift)
        lo = hi


def _slots_listed(
    block_tables: Sequence[tuple[int, ...]],
    starts: Sequence[int],
    counts: Sequence[int],
    block_size: int,
) -> list[int] | IntArray:
    """gather_slots of a small step from lists: one row each (decodes) in C (map), else
    one run of consecutive slots per block a request touches (a chunk of 16 rows is one
    or two ranges, not 16 positions). A position past its table, or a negative entry, is
    rare (an out-of-bounds access): then position by position."""
    size = itertools.repeat(block_size)
    if len(counts) == sum(counts):  # one row each (decodes)
        try:
            blocks: list[int] = list(
                map(operator.getitem, block_tables, map(operator.floordiv, starts, size))
            )
        except IndexError:
            return _slots_one_by_one(block_tables, starts, counts, block_size)
        if min(blocks, default=0) < 0:
            return _slots_one_by_one(block_tables, starts, counts, block_size)
        offsets = map(operator.mod, starts, size)
        return list(map(operator.add, map(operator.mul, blocks, size), offsets))
    runs: list[range] = []
    for table, start, count in zip(block_tables, starts, counts, strict=True):  # bounded: B
        end = start + count
        first, last = start // block_size, (end - 1) // block_size
        entries = table[first : last + 1]
        if len(entries) <= last - first or min(entries) < 0:
            return _slots_one_by_one(block_tables, starts, counts, block_size)
        runs += _block_runs(entries, first, start, end, block_size)
    return np.fromiter(itertools.chain.from_iterable(runs), np.int64, sum(counts))


def _slots_one_by_one(
    block_tables: Sequence[tuple[int, ...]],
    starts: Sequence[int],
    counts: Sequence[int],
    block_size: int,
) -> list[int]:
    """gather_slots, position by position: -1 past a table's end or for a negative entry."""
    out: list[int] = []
    for table, start, count in zip(block_tables, starts, counts, strict=True):
        num_entries = len(table)
        for position in range(start, start + count):  # bounded: SMALL_ROWS in all
            index, offset = divmod(position, block_size)
            block = table[index] if index < num_entries else -1
            out.append(block * block_size + offset if block >= 0 else -1)
    return out


def touched_entries(
    block_tables: Sequence[tuple[int, ...]], first: list[int], num: list[int]
) -> IntArray:
    """Entries [first[i], first[i] + num[i]) of each table, concatenated; -1 past its end."""
    assert len(block_tables) == len(first) == len(num)
    ranges = map(slice, first, map(operator.add, first, num))
    parts = list(map(operator.getitem, block_tables, ranges))  # in C
    if list(map(len, parts)) != num:  # rare: past the end of a table (out of bounds)
        for i, n in enumerate(num):  # bounded: the batch
            parts[i] = (*parts[i], *(-1,) * (n - len(parts[i])))
    total = sum(num)
    return np.fromiter(itertools.chain.from_iterable(parts), np.int64, total)
