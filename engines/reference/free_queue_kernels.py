"""The free block queue's passes, compiled (numba): one call an operation, whatever its
number of blocks (free_queue.py keeps the arrays and says what each pass keeps true).

The queue is a ring of links through the sentinel S = num_blocks, `links` two rows (one
array: numba's call costs about 0.2 us an array argument)::

    next_of = links[0]:  next_of[S] = head, next_of[head] = ..., next_of[tail] = S
    prev_of = links[1]:  prev_of[S] = tail, prev_of[tail] = ..., prev_of[head] = S

`in_queue[b]` says whether block b is linked. Every pass keeps the ring whole and
`in_queue` exact, also when it stops early (an id already queued: nothing of it linked).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def pop_one(links, in_queue):
    """Unlink the block at the head and return it (the caller checks there is one)."""
    next_of, prev_of = links[0], links[1]
    sentinel = next_of.size - 1
    block = next_of[sentinel]
    after = next_of[block]
    next_of[sentinel] = after
    prev_of[after] = sentinel
    in_queue[block] = False
    return block


@njit(cache=True, nogil=True)
def pop_head(links, in_queue, out):
    """Unlink the `out.size` blocks at the head, into `out` in queue order (the caller
    checks that the queue holds that many)."""
    next_of, prev_of = links[0], links[1]
    sentinel = next_of.size - 1
    block = next_of[sentinel]
    for i in range(out.size):  # bounded: out.size
        out[i] = block
        in_queue[block] = False
        block = next_of[block]
    next_of[sentinel] = block
    prev_of[block] = sentinel


@njit(cache=True, nogil=True)
def push_tail(links, in_queue, ids):
    """Link `ids` at the tail, in order; how many were linked: ids.size, or the index of
    the first id already queued (it and the ones after it are not linked)."""
    next_of, prev_of = links[0], links[1]
    sentinel = next_of.size - 1
    tail = prev_of[sentinel]
    linked = ids.size
    for i in range(ids.size):  # bounded: ids.size
        block = ids[i]
        if in_queue[block]:
            linked = i
            break
        in_queue[block] = True
        next_of[tail] = block
        prev_of[block] = tail
        tail = block
    next_of[tail] = sentinel
    prev_of[sentinel] = tail
    return linked


@njit(cache=True, nogil=True)
def unlink(links, in_queue, ids):
    """Unlink those of `ids` that are queued (an id listed twice: once); how many were."""
    next_of, prev_of = links[0], links[1]
    removed = 0
    for i in range(ids.size):  # bounded: ids.size
        block = ids[i]
        if not in_queue[block]:
            continue
        before, after = prev_of[block], next_of[block]
        next_of[before] = after
        prev_of[after] = before
        in_queue[block] = False
        removed += 1
    return removed


@njit(cache=True, nogil=True)
def walk(links, num_free_blocks):
    """The queued blocks, head first."""
    next_of = links[0]
    out = np.empty(num_free_blocks, np.int64)
    block = next_of[next_of.size - 1]
    for i in range(num_free_blocks):  # bounded: the queue's length
        out[i] = block
        block = next_of[block]
    return out
