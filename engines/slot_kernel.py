"""The per-row arrays of a long step compiled (numba): one pass each, where numpy made
five to eight calls and as many arrays a step's rows long (a prefill chunk's thousands).

slots.py calls these above SMALL_ROWS rows, with the same meaning::

    rows(computed, counts)        row k of request i: position computed[i] + j, batch index i
    touched(starts, counts, bs)   the first logical block, and how many, request i's rows touch
    slots(entries, starts, counts, bs)
        position p of request i -> entry * bs + p % bs, -1 where the entry is negative
        (`entries`: each request's touched table entries, concatenated, -1 past its table)

Imported by slots.py with the first long step (numba loads with the first simulation).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def rows(computed, counts, num_rows):
    """(positions, row_req) of the flattened rows; `num_rows`: counts' sum."""
    positions = np.empty(num_rows, np.int64)
    row_req = np.empty(num_rows, np.int64)
    k = 0
    for i in range(computed.size):  # bounded: the batch
        for position in range(computed[i], computed[i] + counts[i]):  # bounded: its rows
            positions[k] = position
            row_req[k] = i
            k += 1
    assert k == num_rows
    return positions, row_req


@njit(cache=True, nogil=True)
def touched(starts, counts, block_size):
    """(first, num): request i's rows touch logical blocks first[i] .. first[i] + num[i] - 1."""
    first = starts // block_size
    num = (starts + counts - 1) // block_size + 1 - first
    return first, num


@njit(cache=True, nogil=True)
def slots(entries, starts, counts, block_size):
    """The slot of each row, request after request (every count >= 1), block by block:
    a block's rows take its consecutive slots (no division per row)."""
    out = np.empty(counts.sum(), np.int64)
    k = 0
    entry = 0  # the entry of request i's first touched block in `entries`
    for i in range(starts.size):  # bounded: the batch
        start, end = starts[i], starts[i] + counts[i]
        first = start // block_size
        for j in range(first, (end - 1) // block_size + 1):  # bounded: its blocks
            block = entries[entry + j - first]
            lo, hi = max(start, j * block_size), min(end, (j + 1) * block_size)
            slot = block * block_size + lo - j * block_size if block >= 0 else -1
            for _ in range(lo, hi):  # bounded: the block's rows
                out[k] = slot
                k += 1
                if block >= 0:
                    slot += 1
        entry += (end - 1) // block_size + 1 - first
    assert entry == entries.size and k == out.size
    return out
