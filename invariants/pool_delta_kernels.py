"""The incremental pool check's per-block passes, compiled (numba): one call a step, for a
snapshot that hands its pool as arrays (`pool_arrays()`, pool_delta.py); two for one that
reads its blocks' counts by id (`step_ids`, then `check_read` on what it read).

What pool_delta.py does in a dozen numpy calls and Python passes over lists (a union in a
set, the holder counts, ref-cnt, free-queue, leak, the blocks whose hash moved), done in
one walk over the step's changed blocks::

    removed, added   blocks that left / entered a table (the table diff; an id may repeat)
    logged           the engine's change log (an id may repeat)
    changed          = the distinct ids of the three, in range, less `reserved`, sorted

    held[b]  -= 1 per entry of b in removed, += 1 per entry in added
    for b in changed:
        ref_cnt[b] != held[b]                        suspect (ref-cnt)
        is_free[b] and ref_cnt[b] > 0                suspect (free-queue)
        not is_free[b] and ref_cnt[b] == 0           lost: the caller asks if it is cached
        free[b] = is_free[b]                         (and the count of blocks marked free)
        hash_changes[b] != seen_hash_changes[b]      rehashed (seen updated)

`marks` is the caller's scratch, one byte a block id, all 0 between calls (each mark set
here is cleared before returning): the union costs the step's ids, not the pool.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _mark_distinct(marks, out, num_out, ids, num_blocks):
    """Append to out[num_out:] each id of `ids` in [0, num_blocks) not marked yet (and
    mark it); returns the new count."""
    for b in ids:  # bounded: the ids given
        if 0 <= b < num_blocks and marks[b] == 0:
            marks[b] = 1
            out[num_out] = b
            num_out += 1
    return num_out


@njit(cache=True, nogil=True)
def changed_ids(marks, removed, added, logged, reserved, num_blocks):
    """The distinct ids of removed, added and logged in [0, num_blocks), less `reserved`,
    sorted; `marks` left all 0."""
    out = np.empty(removed.size + added.size + logged.size, np.int64)
    n = _mark_distinct(marks, out, 0, removed, num_blocks)
    n = _mark_distinct(marks, out, n, added, num_blocks)
    n = _mark_distinct(marks, out, n, logged, num_blocks)
    ids = np.sort(out[:n])
    for b in ids:  # bounded: the changed blocks
        marks[b] = 0
    if reserved.size == 0:
        return ids
    keep = np.ones(ids.size, np.bool_)
    for k in range(ids.size):  # bounded: the changed blocks
        for r in reserved:  # bounded: the reserved ids (vLLM: its null block)
            if ids[k] == r:
                keep[k] = False
    return ids[keep]


@njit(cache=True, nogil=True)
def count_holders(held, ids, delta):
    """held[b] += delta for each entry b of ids (an id may repeat; each in range: the
    tables' diff keeps only those)."""
    for b in ids:  # bounded: the ids given
        assert 0 <= b < held.size, "a held block id lies in the pool"
        held[b] += delta


@njit(cache=True, nogil=True)
def step_ids(held, marks, removed, added, logged, reserved):
    """The holder counts, then the step's changed blocks (sorted): step_blocks' first
    half, for a snapshot that reads its blocks' counts by id (no `pool_arrays`)."""
    count_holders(held, removed, -1)
    count_holders(held, added, 1)
    return changed_ids(marks, removed, added, logged, reserved, held.size)


@njit(cache=True, nogil=True)
def check_read(held, free, ids, ref_cnt, is_free):
    """check_changed of blocks whose counts were read by id (`ref_cnt[k]`, `is_free[k]`:
    block ids[k]'s), their hashes looked at apart; returns (suspect, the change in blocks
    marked free, the lost blocks). `free` is brought up to date."""
    suspect = False
    num_free_delta = np.int64(0)
    lost = np.empty(ids.size, np.int64)
    num_lost = 0
    for k in range(ids.size):  # bounded: the changed blocks
        b, r, f = ids[k], ref_cnt[k], is_free[k]
        if r != held[b] or (f and r > 0):
            suspect = True
        if not f and r == 0:
            lost[num_lost] = b
            num_lost += 1
        num_free_delta += np.int64(f) - np.int64(free[b])
        free[b] = f
    return suspect, num_free_delta, lost[:num_lost]


@njit(cache=True, nogil=True)
def check_changed(held, free, seen_hash_changes, ref_cnt, is_free, hash_changes, ids):
    """The properties of each changed block (module docstring), on the pool's arrays by
    block id; returns (suspect, the change in blocks marked free, the lost blocks, the
    rehashed blocks). `free` and `seen_hash_changes` are brought up to date."""
    suspect, num_free_delta, lost = check_read(held, free, ids, ref_cnt[ids], is_free[ids])
    rehashed = np.empty(ids.size, np.int64)
    num_rehashed = 0
    for b in ids:  # bounded: the changed blocks
        if hash_changes[b] != seen_hash_changes[b]:
            seen_hash_changes[b] = hash_changes[b]
            rehashed[num_rehashed] = b
            num_rehashed += 1
    return suspect, num_free_delta, lost, rehashed[:num_rehashed]


@njit(cache=True, nogil=True)
def step_blocks(
    held, free, seen_hash_changes, marks, ref_cnt, is_free, hash_changes,
    removed, added, logged, reserved,
):  # fmt: skip
    """One step's walk (module docstring): the holder counts, then the changed blocks and
    their properties. Returns (changed, suspect, the change in blocks marked free, lost,
    rehashed)."""
    ids = step_ids(held, marks, removed, added, logged, reserved)
    suspect, num_free_delta, lost, rehashed = check_changed(
        held, free, seen_hash_changes, ref_cnt, is_free, hash_changes, ids
    )
    return ids, suspect, num_free_delta, lost, rehashed


@njit(cache=True, nogil=True)
def fresh_rows(ids, cached_now, words, checked_present, checked_words):
    """The blocks of `ids` (sorted) cached now, and their hashes' rows of `words`; what
    each was checked with (`checked_present`, `checked_words`) updated: a block no longer
    cached is forgotten (pool_delta.py's _check_cached_words)."""
    fresh = np.empty(ids.size, np.int64)
    fresh_words = np.empty((ids.size, words.shape[1]), words.dtype)
    num_fresh = 0
    for b in ids:  # bounded: the blocks whose hash moved
        present = cached_now[b]
        checked_present[b] = present
        if present:
            fresh[num_fresh] = b
            fresh_words[num_fresh, :] = words[b]
            checked_words[b, :] = words[b]
            num_fresh += 1
    return fresh[:num_fresh], fresh_words[:num_fresh]
