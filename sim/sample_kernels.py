"""A step's samples, compiled (numba): each sampling row's token, appended to its request.

The shadow KV's last pass of a step (symbolic.py's `_sample`, step_kernel.py's common
step)::

    sample_append    each sampling row's token from its identity; appended to its request
                     (each request once, each sampling after its last token, room in its
                     region: else nothing is done)
    can_append       that case: each request once, in batch order, after its last token
    append_samples   the appending itself, as can_append allows

Sampling is that of invariants/hash_model.py (SplitMix64's finalizer), one element at a
time by the scalar kernels of invariants/hash_kernels.py: the token after an identity, and
the next identity chained by its term.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from schedcheck.invariants.hash_kernels import sample_token, term
from schedcheck.invariants.hash_model import SAMPLE_SALT


@njit(cache=True, nogil=True)
def sample_append(
    arena_ids, arena_tokens, base, num_tokens, cap, writers, batch, identity, positions, span
):
    """(True, the token each sampling row samples), each appended to request writers[k]
    (store index) as the token after position positions[k]; (False, nothing) with nothing
    changed unless each request samples once, in batch order, after its last known token,
    with room in its region."""
    if not can_append(num_tokens, cap, writers, batch, positions):
        return False, np.empty(0, dtype=np.int64)
    tokens = append_samples(
        arena_ids, arena_tokens, base, num_tokens, writers, identity, positions, span
    )
    return True, tokens


@njit(cache=True, nogil=True)
def can_append(num_tokens, cap, writers, batch, positions):
    """Does each sampling row k sample after its request's last known token, with room
    in its region, each request once and in batch order?"""
    for k in range(writers.size):  # bounded: the sampling rows
        w = writers[k]
        if positions[k] != num_tokens[w] - 1 or num_tokens[w] >= cap[w]:
            return False
        if k and batch[k] <= batch[k - 1]:
            return False
    return True


@njit(cache=True, nogil=True)
def append_samples(arena_ids, arena_tokens, base, num_tokens, writers, identity, positions, span):
    """The token each sampling row samples, appended to its request (as can_append allows)."""
    tokens = np.empty(writers.size, dtype=np.int64)
    for k in range(writers.size):  # bounded: the sampling rows
        w = writers[k]
        token = sample_token(identity[k], np.uint64(span), SAMPLE_SALT)
        at = base[w] + num_tokens[w]
        arena_tokens[at] = np.int64(token)
        arena_ids[at] = arena_ids[at - 1] + term(np.uint64(positions[k] + 1), token)
        num_tokens[w] += 1
        tokens[k] = np.int64(token)
    return tokens
