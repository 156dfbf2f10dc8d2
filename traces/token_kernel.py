"""The expansion of hash ids into tokens compiled (numba): one pass, no temporaries.

`tokens.expand_hash_ids` in numpy makes six passes over a prompt (keys, five steps of the
mix, the modulo) and as many arrays of its length; a real trace's prompts run to tens of
thousands of tokens. `expand` computes exactly the same tokens in one loop::

    token k = mix64(hash_ids[k // block] << shift | k % block) % span + first_token_id

uint64 arithmetic wraps as numpy's does. `mix64` is also the hash model's
(invariants/hash_kernels.py); the mix's constants are traces/mix64.py's. Imported by
`tokens.expand_hash_ids` with its first call (numba loads with the first simulation, not
with the command line).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from schedcheck.traces.mix64 import MIX64_GOLDEN, MIX64_M1, MIX64_M2


@njit(cache=True, nogil=True)
def mix64(value):
    """traces.mix64.mix64 of one uint64."""
    z = value + MIX64_GOLDEN
    z = (z ^ (z >> np.uint64(30))) * MIX64_M1
    z = (z ^ (z >> np.uint64(27))) * MIX64_M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def expand(hash_ids, hash_block_size, input_length, span, shift, first_token_id):
    """The first `input_length` tokens (int64) of the blocks `hash_ids` (uint64) name,
    `hash_block_size` tokens each, from a vocabulary of `span` ids after the
    `first_token_id` special ones; token j of hash id h is keyed by h << shift | j."""
    out = np.empty(input_length, np.int64)
    k = 0
    for block in range(hash_ids.size):  # bounded: the hash ids
        base = hash_ids[block] << shift
        for offset in range(min(hash_block_size, input_length - k)):  # bounded: a block
            out[k] = np.int64(mix64(base + np.uint64(offset)) % span) + first_token_id
            k += 1
    assert k == input_length
    return out
