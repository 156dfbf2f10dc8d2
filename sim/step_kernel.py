"""A whole common step of the shadow KV in one compiled call (numba).

Most steps of a replay or a fuzz example are the common case: every input token is the
request's token there, every slot lies in the cache and overwrites no KV a live request
verified, every row attends exactly keys 0..its position, each request's unverified keys
are the chunk it writes now and read right (and, after a prefix-cache hit or a
preemption, the cached keys before it: `prefix`), and each sampling row samples after its
request's last known token. `common_step` does that step's write, read and sample
(symbolic.py's `_write`, `_check_alignment`, `_read` and `_sample`) in one call of the
kernels of shadow_kernels.py and sample_kernels.py, where the Python path makes five
calls and builds a dozen arrays between them::

    cases checked, nothing changed yet        reads_from_verified, can_append,
                                              count_misaligned, truth_of_rows,
                                              old_values, count_verified_overwrites
    write                                     write_slots                     -> WRITTEN
    read: each row's slot holds its identity  count_wrong
    read: each prefix through its table       count_range_wrong
    read: each window through group 1         count_range_wrong               -> WRITTEN
    sample                                    grow_verified, append_samples   -> DONE

A hybrid step (group 0 full, group 1 a sliding window: `window`) also writes each row's
identity xor group 1's tag through group 1's slot mapping, after group 0's writes as
`_write` does, and reads each request's window keys through group 1's tables as
`_read_group` does. Its case: group 1's slots in the cache, overwriting no verified KV,
and none of them one of group 0's slots this step (group 0's writes then change nothing
group 1's writes count, and group 1's change nothing group 0's read finds).

A request whose verified keys end before its chunk (its first step after a prefix-cache
hit, or after a preemption cut its verified keys: keys [verified_len, num_computed) in
cached blocks) reads those keys through its block table, as `_read`'s general path reads
them, after every write of the step::

    request B, block_size 4, 8 keys cached:  | prefix (read)  | chunk (written, read) |
                                             0                8                    11
    prefix: B's batch index, lows 0, highs 8, and the table entries keys 0..7 touch

`prefix` lists exactly those requests (any other request with unverified keys before its
chunk declines the step).

It returns the stage it reached. NOTHING_DONE: some case failed before anything changed
(the Python path runs the step). WRITTEN: the writes are done exactly as `_write` does
them, and a read found a wrong key (a slot written twice in the step, a key past the
known tokens): the Python path reads, words the finding and samples. DONE: the step is
done; Python adds the verified blocks to the requests' verified tables.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from schedcheck.sim.sample_kernels import append_samples, can_append
from schedcheck.sim.shadow_kernels import (
    count_misaligned,
    count_range_wrong,
    count_verified_overwrites,
    count_wrong,
    grow_verified,
    old_values,
    reads_from_verified,
    tag_identities,
    truth_of_rows,
    write_slots,
)

NOTHING_DONE, WRITTEN, DONE = 0, 1, 2


@njit(cache=True, nogil=True)
def common_step(
    store,
    slot_state,
    verified_len,
    verified_blocks,
    indices,
    starts,
    counts,
    num_computed,
    seq_lens,
    query_start_loc,
    input_ids,
    slots,
    positions,
    row_req,
    logits_indices,
    step,
    block_size,
    span,
    prefix,
    window,
):
    """(stage, each row's true identity, grown, num_blocks, sampled tokens, keys read
    through block tables: prefixes and windows) of one step.

    store: the token store's (base, num_tokens, cap, ids, tokens) by store index;
    slot_state: (shadow, writer_req, writer_pos, writer_step, verifiers) by slot or block;
    indices[i], starts[i], counts[i]: request i's store index and its chunk's positions
    (the scheduler's); the rest: the step's metadata. prefix: (batch indices, lows,
    highs, table entries) of the keys read before the chunks (all empty: none). window:
    group 1's (slot mapping, tag, then count_range_wrong's store indices, lows, highs and
    table entries of the windows read); all empty with one group. grown, num_blocks:
    grow_verified's (the requests whose verified blocks grow), with DONE only."""
    base, num_tokens, cap, arena_ids, arena_tokens = store
    shadow = slot_state[0]
    group_slots, tag = window[0], window[1]
    # the cases, cheapest first (per request, then per row): nothing changes until all hold
    if not reads_from_verified(verified_len, indices, num_computed, seq_lens, prefix):
        return _declined(NOTHING_DONE, np.empty(0, dtype=np.uint64))
    batch = row_req[logits_indices]
    writers = indices[batch]
    sampled_positions = positions[logits_indices]
    if not can_append(num_tokens, cap, writers, batch, sampled_positions):
        return _declined(NOTHING_DONE, np.empty(0, dtype=np.uint64))
    if count_misaligned(seq_lens, query_start_loc, row_req, positions):
        return _declined(NOTHING_DONE, np.empty(0, dtype=np.uint64))
    true_ids, _, first_wrong = truth_of_rows(
        base, num_tokens, arena_ids, arena_tokens, indices, starts, counts, input_ids
    )
    if first_wrong >= 0:
        return _declined(NOTHING_DONE, np.empty(0, dtype=np.uint64))
    if not _writes_hold(
        slot_state, verified_blocks, slots, group_slots, positions, row_req, indices, block_size
    ):
        return _declined(NOTHING_DONE, np.empty(0, dtype=np.uint64))
    _write_groups(slot_state, slots, group_slots, tag, positions, row_req, indices, true_ids, step)
    if count_wrong(shadow, slots, true_ids):
        return _declined(WRITTEN, true_ids)
    wrong, num_range_keys = _count_ranges_wrong(
        base, num_tokens, arena_ids, indices, prefix, window, block_size, shadow
    )
    if wrong:
        return _declined(WRITTEN, true_ids)
    grown, num_blocks = grow_verified(verified_len, verified_blocks, indices, seq_lens, block_size)
    tokens = append_samples(
        arena_ids, arena_tokens, base, num_tokens, writers, true_ids[logits_indices],
        sampled_positions, span,
    )  # fmt: skip
    return DONE, true_ids, grown, num_blocks, tokens, num_range_keys


@njit(cache=True, nogil=True)
def _count_ranges_wrong(base, num_tokens, arena_ids, indices, prefix, window, block_size, shadow):
    """(keys wrong, keys read) of the ranges read through block tables, after the writes:
    each prefix through group 0's tables, then (none wrong) each window through group 1's,
    its identities tagged."""
    prefix_reqs, prefix_lows, prefix_highs, prefix_entries = prefix
    wrong, num_keys = 0, 0
    if prefix_reqs.size:
        wrong, num_keys = count_range_wrong(
            base, num_tokens, arena_ids, indices[prefix_reqs], prefix_lows, prefix_highs,
            prefix_entries, block_size, shadow, np.uint64(0),
        )  # fmt: skip
    _, tag, who, lows, highs, entries = window
    if not wrong and who.size:
        wrong, num_window_keys = count_range_wrong(
            base, num_tokens, arena_ids, who, lows, highs, entries, block_size, shadow, tag
        )
        num_keys += num_window_keys
    return wrong, num_keys


@njit(cache=True, nogil=True)
def _write_groups(slot_state, slots, group_slots, tag, positions, row_req, indices, ids, step):
    """Each row's identity through group 0's slots, then xor group 1's tag through group
    1's (none: one group), as `_write` writes them."""
    shadow, writer_req, writer_pos, writer_step, _ = slot_state
    write_slots(
        shadow, writer_req, writer_pos, writer_step, slots, positions, row_req, indices, ids,
        step,
    )  # fmt: skip
    if group_slots.size:
        tagged = tag_identities(ids, tag)
        write_slots(
            shadow, writer_req, writer_pos, writer_step, group_slots, positions, row_req,
            indices, tagged, step,
        )  # fmt: skip


@njit(cache=True, nogil=True)
def _writes_hold(
    slot_state, verified_blocks, slots, group_slots, positions, row_req, indices, block_size
):
    """Every write lies in the cache and overwrites no KV a live request verified (other
    than the writer's own keys, in group 0), and no group 1 write is one of group 0's
    slots this step."""
    shadow, _, _, _, verifiers = slot_state
    for group, written in enumerate((slots, group_slots)):  # bounded: two groups
        in_cache, old = old_values(shadow, written)
        if not in_cache or count_verified_overwrites(
            verifiers, verified_blocks, written, positions, row_req, indices, old, block_size,
            group == 0,
        ):  # fmt: skip
            return False
    if not group_slots.size:
        return True
    group_0 = np.sort(slots)
    at = np.searchsorted(group_0, group_slots)
    for w in range(group_slots.size):  # bounded: the writes
        if at[w] < group_0.size and group_0[at[w]] == group_slots[w]:
            return False
    return True


@njit(cache=True, nogil=True)
def _declined(stage, true_ids):
    """common_step's result short of DONE: nothing grown, nothing sampled."""
    none = np.empty(0, dtype=np.int64)
    return stage, true_ids, none, none, none, 0
