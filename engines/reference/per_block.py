"""The pools' per-block arrays (ref_cnt, the free-queue flags, hash-change counts) read and
written at a list of block ids.

A numpy call costs microseconds inside a run, more than in a loop of its own: its code is
cold in the CPU's caches between calls. Measured in a reference fuzz campaign:
`BlockPool.free_blocks`, about 15 ids a call, 26.5 us a call, where a fancy `-=` and an
`.all()` timed alone take 1.0 and 2.0 us. A Python loop over a few ids costs a fraction of
that. A decode step hands the pools one id or two, a prefill chunk hundreds: up to
FEW_IDS the loop, past them numpy.

Each function does what the fancy index does, duplicate ids included (`add_at` adds once
to an id listed twice, as `values[ids] += delta` does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FEW_IDS = 16  # up to here a loop of scalar reads and writes beats one fancy index


def add_at(values: npt.NDArray[np.integer], block_ids: Sequence[int], delta: int) -> None:
    """values[block_ids] += delta."""
    if len(block_ids) > FEW_IDS:
        values[np.fromiter(block_ids, np.int64, len(block_ids))] += delta
        return
    for block_id in dict.fromkeys(block_ids):  # bounded: FEW_IDS; once each, as numpy
        values[block_id] += delta


def set_at(values: npt.NDArray[np.generic], block_ids: Sequence[int], value: object) -> None:
    """values[block_ids] = value."""
    if len(block_ids) > FEW_IDS:
        values[np.fromiter(block_ids, np.int64, len(block_ids))] = value
        return
    for block_id in block_ids:  # bounded: FEW_IDS
        values[block_id] = value


def any_at(values: npt.NDArray[np.generic], block_ids: Sequence[int]) -> bool:
    """values[block_ids].any()."""
    if len(block_ids) > FEW_IDS:
        return bool(values[np.fromiter(block_ids, np.int64, len(block_ids))].any())
    return any(map(values.item, block_ids))


def release_at(ref_cnt: npt.NDArray[np.integer], block_ids: Sequence[int]) -> list[int]:
    """ref_cnt[block_ids] -= 1; the ids whose count reached 0, in the order given (an id
    listed twice, twice). AssertionError where a count went negative: a double free."""
    add_at(ref_cnt, block_ids, -1)
    if len(block_ids) > FEW_IDS:
        ids = np.fromiter(block_ids, np.int64, len(block_ids))
        left = ref_cnt[ids]  # read once: each block's holders after this release
        assert (left >= 0).all(), "ref_cnt went negative: double free"
        return list(ids[left == 0].tolist())
    left = list(map(ref_cnt.item, block_ids))
    assert min(left, default=0) >= 0, "ref_cnt went negative: double free"
    return [block_id for block_id, count in zip(block_ids, left, strict=True) if count == 0]
