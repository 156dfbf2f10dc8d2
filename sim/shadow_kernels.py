"""The shadow KV's per-step loops, compiled (numba): one call where numpy took a dozen.

A step of `symbolic.py` is a fixed number of array passes over its rows; at a few dozen
rows each numpy call costs more than its work. Each kernel here is one of those passes,
fused, and computes exactly what the numpy code it replaced computed (the same values, in
the same order; uint64 arithmetic wraps as numpy's does). A kernel that meets anything but
the common case changes nothing and says so; the caller then takes the general path,
which also words the findings::

    truth_of_rows    each row's true identity and token (a gather from the arena) and the
                     first row whose input token is not the request's token there
    store_writes     old = shadow[slots]; then shadow, writer_req, writer_pos, writer_step
                     written; counts the writes over KV some live request verified (other
                     than the writer's own keys before its position: the slow path's cue);
                     a slot outside the cache: nothing written (the caller reports it)
    gather_keys      the keys of ranges of positions: each key's request, slot (through the
                     block-table entries the ranges touch) and expected identity
    count_wrong      reads whose slot holds another identity, or whose key is past the
                     request's known tokens (expected 0)
    count_range_wrong  gather_keys then count_wrong in one pass (identities tagged as a
                     KV-cache group tags them; a slot outside the cache counts as wrong),
                     no array built: a sliding-window group's reads
    count_misaligned rows that do not attend exactly keys 0..position
    grow_verified    verified lengths grown; the requests whose verified blocks grow
    verify_own_chunks  the common read: each request reads exactly the chunk it just wrote
                     (count_wrong of its rows, then grow_verified), or nothing is done
    reads_from_verified  does each request read exactly its unverified keys (its chunk,
                     and before it the ranges handed for a step after a prefix hit)?
    add_verifiers    verifiers[b] += delta, each occurrence counted
    block_contents   each block's last identity and whether all its slots were written
                     (the pool check's view of a freshly cached block)
    window_lows      where each request's reads through a sliding window start, and the
                     requests that read any key through it
    tag_identities   the identities a KV-cache group writes: each xor its tag, 0 (none
                     known) left 0 (`tag_identity` one at a time)

Identities are those of invariants/hash_model.py (SplitMix64's finalizer). A step's samples
are sample_kernels.py's.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def truth_of_rows(base, num_tokens, arena_ids, arena_tokens, indices, starts, counts, input_ids):
    """(true identity, true token) of each row: positions [starts[i], starts[i] + counts[i])
    of request indices[i] (built), concatenated; (0, -1) past its known tokens. And the
    first row whose input token differs from the true one, or -1."""
    num_rows = 0
    for i in range(indices.size):  # bounded: the requests
        num_rows += counts[i]
    assert input_ids.size == num_rows, "one input token a row"
    true_ids = np.empty(num_rows, dtype=np.uint64)
    true_tokens = np.empty(num_rows, dtype=np.int64)
    first_wrong = -1
    row = 0
    for i in range(indices.size):  # bounded: the requests
        request = indices[i]
        start, known = base[request], num_tokens[request]
        for position in range(starts[i], starts[i] + counts[i]):  # bounded: its rows
            at = start + position if position < known else 0
            true_ids[row] = arena_ids[at]
            true_tokens[row] = arena_tokens[at]
            if first_wrong < 0 and true_tokens[row] != input_ids[row]:
                first_wrong = row
            row += 1
    return true_ids, true_tokens, first_wrong


@njit(cache=True, nogil=True)
def store_writes(
    shadow,
    writer_req,
    writer_pos,
    writer_step,
    verifiers,
    verified_blocks,
    slots,
    positions,
    batch,
    store_indices,
    identities,
    step,
    block_size,
    slots_of_positions,
):
    """Write identities[w] into slots[w], for position positions[w] of the request of
    batch index batch[w] (store index store_indices[batch[w]]); returns (True, the
    identities the slots held before the step's writes, how many writes changed KV that a
    live request other than the writer's own keys verified). The last write of a slot
    written twice wins. A slot outside the cache (negative ones too): (False, nothing, 0)
    with nothing written."""
    in_cache, old = old_values(shadow, slots)
    if not in_cache:
        return False, old, 0
    num_verified_overwrites = count_verified_overwrites(
        verifiers, verified_blocks, slots, positions, batch, store_indices, old, block_size,
        slots_of_positions,
    )  # fmt: skip
    write_slots(
        shadow, writer_req, writer_pos, writer_step, slots, positions, batch, store_indices,
        identities, step,
    )  # fmt: skip
    return True, old, num_verified_overwrites


@njit(cache=True, nogil=True)
def old_values(shadow, slots):
    """(True, shadow[slots]); (False, nothing) where a slot lies outside the cache."""
    old = np.empty(slots.size, dtype=np.uint64)
    for w in range(slots.size):  # bounded: the writes
        if slots[w] < 0 or slots[w] >= shadow.size:
            return False, old[:0]
        old[w] = shadow[slots[w]]
    return True, old


@njit(cache=True, nogil=True)
def count_verified_overwrites(
    verifiers, verified_blocks, slots, positions, batch, store_indices, old, block_size,
    slots_of_positions,
):  # fmt: skip
    """The writes over KV (old[w] != 0) that a live request verified, other than the
    writer's own keys before its position (its own last, partly verified block). A block
    size that is a power of two divides by a shift (most writes overwrite old KV in a
    full cache: two divisions each)."""
    count = 0
    shift = _log2_or_minus_one(block_size)
    for w in range(slots.size):  # bounded: the writes
        if old[w] != 0:
            if shift >= 0:
                slot_block, position_block = slots[w] >> shift, positions[w] >> shift
            else:
                slot_block, position_block = slots[w] // block_size, positions[w] // block_size
            held = verifiers[slot_block]
            writer = store_indices[batch[w]]
            own = slots_of_positions and position_block < verified_blocks[writer]
            if held > (1 if own else 0):
                count += 1
    return count


@njit(cache=True, nogil=True)
def _log2_or_minus_one(n):
    """k where n == 2**k (n >= 1), else -1."""
    k = 0
    while (1 << k) < n:  # bounded: 63 doublings
        k += 1
    return k if (1 << k) == n else -1


@njit(cache=True, nogil=True)
def write_slots(
    shadow, writer_req, writer_pos, writer_step, slots, positions, batch, store_indices,
    identities, step,
):  # fmt: skip
    """Each write w in order (all slots in the cache): its identity, writer, position, step."""
    for w in range(slots.size):  # bounded: the writes
        slot = slots[w]
        shadow[slot] = identities[w]
        writer_req[slot] = store_indices[batch[w]]
        writer_pos[slot] = positions[w]
        writer_step[slot] = step


@njit(cache=True, nogil=True)
def gather_keys(base, num_tokens, arena_ids, todo, who, lows, highs, entries, block_size):
    """(request, key, slot, expected identity) of keys [lows[k], highs[k]) of batch index
    todo[k] (store index who[k]), each request's in turn. `entries`: for each k in turn,
    its table's entries lows[k] // block_size .. (highs[k] - 1) // block_size (-1 past the
    table's end); slot -1 through a negative entry. Expected identity: the arena's, its
    entry 0 (0) past the request's known tokens. Every range holds a key."""
    num_keys = 0
    for k in range(todo.size):  # bounded: the requests
        assert highs[k] > lows[k] >= 0, "a range of keys"
        num_keys += highs[k] - lows[k]
    key_req = np.empty(num_keys, dtype=np.int64)
    keys = np.empty(num_keys, dtype=np.int64)
    slots = np.empty(num_keys, dtype=np.int64)
    expected = np.empty(num_keys, dtype=np.uint64)
    row, entry = 0, 0
    for k in range(todo.size):  # bounded: the requests
        w, first_block = who[k], lows[k] // block_size
        for key in range(lows[k], highs[k]):  # bounded: its keys
            block = entries[entry + key // block_size - first_block]
            key_req[row], keys[row] = todo[k], key
            slots[row] = block * block_size + key % block_size if block >= 0 else -1
            at = base[w] + key if key < num_tokens[w] else 0
            expected[row] = arena_ids[at]
            row += 1
        entry += (highs[k] - 1) // block_size + 1 - first_block
    assert entry == entries.size, "the entries the ranges touch, each once"
    return key_req, keys, slots, expected


@njit(cache=True, nogil=True)
def count_wrong(shadow, slots, expected):
    """Reads (slots all in the cache) that find another identity than expected, or expect
    0 (a key past the request's known tokens)."""
    wrong = 0
    for k in range(slots.size):  # bounded: the keys read
        if expected[k] == 0 or shadow[slots[k]] != expected[k]:
            wrong += 1
    return wrong


@njit(cache=True, nogil=True)
def count_range_wrong(
    base, num_tokens, arena_ids, who, lows, highs, entries, block_size, shadow, tag
):
    """(keys wrong, keys read) of the reads gather_keys lists for these ranges (`who`:
    each range's store index), each expected identity xor `tag` where it is not 0: a key
    is wrong where its slot is outside the cache (or -1), holds another identity, or the
    key is past the request's known tokens (expected 0). Nothing is written. Walked block
    by block: a block's keys read its consecutive slots (no division per key)."""
    wrong, num_keys, entry = 0, 0, 0
    for k in range(who.size):  # bounded: the ranges
        low, high = lows[k], highs[k]
        assert high > low >= 0, "a range of keys"
        first_block = low // block_size
        for j in range(first_block, (high - 1) // block_size + 1):  # bounded: its blocks
            block = entries[entry + j - first_block]
            start, stop = max(low, j * block_size), min(high, (j + 1) * block_size)
            wrong += _block_keys_wrong(
                base[who[k]], num_tokens[who[k]], arena_ids, block, block_size, j, start, stop,
                shadow, tag,
            )  # fmt: skip
        num_keys += high - low
        entry += (high - 1) // block_size + 1 - first_block
    assert entry == entries.size, "the entries the ranges touch, each once"
    return wrong, num_keys


@njit(cache=True, nogil=True)
def _block_keys_wrong(base, num_known, arena_ids, block, block_size, j, start, stop, shadow, tag):
    """count_range_wrong's keys [start, stop) of logical block j, read through `block`."""
    wrong = 0
    in_cache = block >= 0 and (block + 1) * block_size <= shadow.size
    slot = block * block_size + start - j * block_size
    for key in range(start, stop):  # bounded: one block's keys
        expected = arena_ids[base + key] if key < num_known else np.uint64(0)
        expected = tag_identity(expected, tag)
        if in_cache:
            if expected == 0 or shadow[slot] != expected:
                wrong += 1
        elif expected == 0 or block < 0 or not 0 <= slot < shadow.size or shadow[slot] != expected:
            wrong += 1  # -1, or a block past the cache's end: slot by slot
        slot += 1
    return wrong


@njit(cache=True, nogil=True)
def count_misaligned(seq_lens, query_start_loc, row_req, positions):
    """Rows whose last key (bottom-right alignment) is not their position."""
    wrong = 0
    for r in range(row_req.size):  # bounded: the rows
        i = row_req[r]
        if seq_lens[i] - query_start_loc[i + 1] + r != positions[r]:
            wrong += 1
    return wrong


@njit(cache=True, nogil=True)
def grow_verified(verified_len, verified_blocks, who, highs, block_size):
    """verified_len[w] = max(verified_len[w], highs[k]) for each w = who[k] (all read from
    the state before: the last k of a repeated w wins); returns the k whose verified keys
    now reach past their verified blocks, and each one's block count (ceil(highs / size))."""
    n = who.size
    longest = np.empty(n, dtype=np.int64)
    for k in range(n):  # bounded: the requests that read
        longest[k] = max(verified_len[who[k]], highs[k])
    grown = np.empty(n, dtype=np.int64)
    num_blocks = np.empty(n, dtype=np.int64)
    num_grown = 0
    for k in range(n):  # bounded: the requests that read
        verified_len[who[k]] = longest[k]
        blocks = (highs[k] + block_size - 1) // block_size
        if blocks > verified_blocks[who[k]]:
            grown[num_grown], num_blocks[num_grown] = k, blocks
            num_grown += 1
    return grown[:num_grown], num_blocks[:num_grown]


@njit(cache=True, nogil=True)
def verify_own_chunks(
    verified_len, verified_blocks, who, num_computed, seq_lens, shadow, slots, expected, block_size
):
    """The common read of a step, where each request's unverified keys are exactly the
    chunk it just wrote (verified_len[who[i]] == num_computed[i] < seq_lens[i]) and each
    row's slot lies in the cache: if every row's slot holds the identity expected there
    (count_wrong is 0), grow_verified(..., who, seq_lens) and return (True, its result);
    else (False, nothing) with nothing changed."""
    none = np.empty(0, dtype=np.int64)
    if not reads_from_verified(verified_len, who, num_computed, seq_lens, (none, none, none, none)):
        return False, none, none
    if count_wrong(shadow, slots, expected):
        return False, none, none
    grown, num_blocks = grow_verified(verified_len, verified_blocks, who, seq_lens, block_size)
    return True, grown, num_blocks


@njit(cache=True, nogil=True)
def reads_from_verified(verified_len, indices, num_computed, seq_lens, prefix):
    """Does each request read exactly its unverified keys: its chunk, and before it the
    range `prefix` lists for it (keys [verified_len, num_computed), in batch order), if
    any?"""
    reqs, lows, highs, _ = prefix
    k = 0
    for i in range(indices.size):  # bounded: the requests
        low = verified_len[indices[i]]
        if low > num_computed[i] or seq_lens[i] <= num_computed[i]:
            return False
        if low < num_computed[i]:
            if k == reqs.size or reqs[k] != i or lows[k] != low:
                return False
            if highs[k] != num_computed[i]:
                return False
            k += 1
    return k == reqs.size


@njit(cache=True, nogil=True)
def add_verifiers(verifiers, blocks, delta):
    """verifiers[b] += delta for each b in blocks, each occurrence counted."""
    for b in blocks:  # bounded: the blocks
        assert 0 <= b < verifiers.size, "a verified block lies in the pool"
        verifiers[b] += delta


@njit(cache=True, nogil=True)
def block_contents(shadow, block_ids, block_size):
    """(the identity at each block's last slot, whether every slot of it was written)."""
    n = block_ids.size
    last = np.empty(n, dtype=np.uint64)
    complete = np.empty(n, dtype=np.bool_)
    for k in range(n):  # bounded: the blocks
        start = block_ids[k] * block_size
        assert 0 <= start <= shadow.size - block_size, "a block of the pool"
        complete[k] = True
        for slot in range(start, start + block_size):  # bounded: the block's slots
            if shadow[slot] == 0:
                complete[k] = False
                break
        last[k] = shadow[start + block_size - 1]
    return last, complete


@njit(cache=True, nogil=True)
def tag_identity(identity, tag):
    """The identity a KV-cache group writes for a position, or expects there: the
    position's identity xor the group's tag (hash_model.group_tag); 0, no identity known,
    stays 0."""
    return identity ^ tag if identity != 0 else identity


@njit(cache=True, nogil=True)
def tag_identities(identities, tag):
    """tag_identity of each identity (a new array)."""
    out = np.empty_like(identities)
    for k in range(identities.size):  # bounded: the identities
        out[k] = tag_identity(identities[k], tag)
    return out


@njit(cache=True, nogil=True)
def window_lows(positions, query_start_loc, seq_lens, sliding_window):
    """(todo, lows): request i's rows read keys [lows[i], seq_lens[i]) through a sliding
    window of `sliding_window` keys, lows[i] the window start of its first row's position
    p, max(0, p - sliding_window + 1) (capped at seq_lens[i]); todo, the requests with any
    key to read."""
    num_reqs = seq_lens.size
    lows = np.empty(num_reqs, np.int64)
    todo = np.empty(num_reqs, np.int64)
    num_todo = 0
    for i in range(num_reqs):  # bounded: the requests
        low = min(max(positions[query_start_loc[i]] - (sliding_window - 1), 0), seq_lens[i])
        lows[i] = low
        if seq_lens[i] > low:
            todo[num_todo] = i
            num_todo += 1
    return todo[:num_todo], lows
