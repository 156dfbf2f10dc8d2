"""The pools' per-block arrays (ref_cnt, the free-queue flags, hash-change counts) read and
written at a list of block ids.

A fancy index costs a numpy call or three (the ids converted, the gather, the scatter),
about a microsecond each; a Python loop over a few ids costs a fraction of that. A decode
step hands the pools one id or two, a prefill chunk hundreds: up to FEW_IDS the loop, past
them numpy. Measured over 640 reference fuzz scenarios, six alternating rounds in one
process: the pools' methods that take these lists (get_new_blocks, touch, free_blocks,
cache_full_blocks; the radix manager's _take_pages and free) 150 -> 104 ms.

Each function does what the fancy index does, duplicate ids included (`add_at` adds once
to an id listed twice, as `values[ids] += delta` does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FEW_IDS = 16  # up to here a loop of scalar reads and writes beats one fancy index
IdArray = npt.NDArray[np.int64]
BlockIds = Sequence[int] | IdArray  # a list for a few ids, an int64 array for many


def ids_of(block_ids: BlockIds) -> BlockIds:
    """The ids as the functions here read them at least cost: a list for a few, one int64
    array for many (a caller that hands them to several functions converts them once, not
    once a call; ids already in an int64 array are not copied)."""
    if len(block_ids) > FEW_IDS:
        return id_array(block_ids)
    return block_ids.tolist() if isinstance(block_ids, np.ndarray) else block_ids


def id_array(block_ids: BlockIds) -> IdArray:
    """Block ids as an int64 array: the array itself where they are one already."""
    if isinstance(block_ids, np.ndarray) and block_ids.dtype == np.int64:
        return block_ids
    return np.fromiter(block_ids, np.int64, len(block_ids))


def add_at(values: npt.NDArray[np.integer], block_ids: BlockIds, delta: int) -> None:
    """values[block_ids] += delta."""
    if len(block_ids) > FEW_IDS:
        values[id_array(block_ids)] += delta
        return
    for block_id in dict.fromkeys(block_ids):  # bounded: FEW_IDS; once each, as numpy
        values[block_id] += delta


def set_at(values: npt.NDArray[np.generic], block_ids: BlockIds, value: int | bool) -> None:
    """values[block_ids] = value."""
    if len(block_ids) > FEW_IDS:
        values[id_array(block_ids)] = value
        return
    for block_id in block_ids:  # bounded: FEW_IDS
        values[block_id] = value


def any_at(values: npt.NDArray[np.generic], block_ids: BlockIds) -> bool:
    """values[block_ids].any()."""
    if len(block_ids) > FEW_IDS:
        return bool(np.count_nonzero(values[id_array(block_ids)]))  # .any(), a third the cost
    return any(map(values.item, block_ids))


def release_at(ref_cnt: npt.NDArray[np.integer], block_ids: Sequence[int]) -> list[int]:
    """ref_cnt[block_ids] -= 1; the ids whose count reached 0, in the order given (an id
    listed twice, twice). AssertionError where a count went negative: a double free."""
    if len(block_ids) > FEW_IDS:
        ids = id_array(block_ids)  # converted once: the release and the read
        ref_cnt[ids] -= 1
        holders = ref_cnt[ids]  # read once: each block's holders after this release
        assert not np.count_nonzero(holders < 0), "ref_cnt went negative: double free"
        return list(ids[holders == 0].tolist())
    add_at(ref_cnt, block_ids, -1)
    left = list(map(ref_cnt.item, block_ids))
    assert min(left, default=0) >= 0, "ref_cnt went negative: double free"
    return [block_id for block_id, count in zip(block_ids, left, strict=True) if count == 0]
