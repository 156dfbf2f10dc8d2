"""Deterministic expansion of Mooncake-style hash ids into token ids.

Each hash id names one block of `hash_block_size` prompt tokens. Token j of the block of
hash id h is `mix64(h * 2**20 + j) % (vocab_size - FIRST_TOKEN_ID) + FIRST_TOKEN_ID`, a fixed
integer mix (no Python `hash()`), so the same id gives the same tokens wherever it
appears, in every process; shared ids mean a shared prefix. Compiled with numba
(token_kernel.py); `expand_hash_ids_numpy` defines the same tokens in numpy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from schedcheck.traces.mix64 import mix64

DEFAULT_VOCAB_SIZE = 32_000
FIRST_TOKEN_ID = 3  # 0..2 are left to special tokens (pad, bos, eos)
HASH_ID_SHIFT = 20  # token j of hash id h is keyed by h * 2**HASH_ID_SHIFT + j


def expand_hash_ids(
    hash_ids: npt.ArrayLike,
    hash_block_size: int,
    input_length: int,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> npt.NDArray[np.int64]:
    """Token ids of a prompt given as hash ids; the last block is cut to `input_length`.
    Computed in one compiled pass (token_kernel.py; `expand_hash_ids_numpy`: the same
    tokens in numpy)."""
    from schedcheck.traces import token_kernel  # numba: with the first expansion

    ids = _checked_ids(hash_ids, hash_block_size, input_length, vocab_size)
    span = np.uint64(vocab_size - FIRST_TOKEN_ID)
    shift = np.uint64(HASH_ID_SHIFT)
    return token_kernel.expand(ids, hash_block_size, input_length, span, shift, FIRST_TOKEN_ID)


def expand_hash_ids_numpy(
    hash_ids: npt.ArrayLike,
    hash_block_size: int,
    input_length: int,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> npt.NDArray[np.int64]:
    """expand_hash_ids in numpy: the definition the compiled pass is tested against."""
    ids = _checked_ids(hash_ids, hash_block_size, input_length, vocab_size)
    offsets = np.arange(hash_block_size, dtype=np.uint64)
    keys = (ids[:, None] << np.uint64(HASH_ID_SHIFT)) + offsets[None, :]
    tokens = mix64(keys.ravel()[:input_length]) % np.uint64(vocab_size - FIRST_TOKEN_ID)
    return (tokens + np.uint64(FIRST_TOKEN_ID)).astype(np.int64)


def _checked_ids(
    hash_ids: npt.ArrayLike, hash_block_size: int, input_length: int, vocab_size: int
) -> npt.NDArray[np.uint64]:
    ids = np.asarray(hash_ids, dtype=np.uint64)
    assert hash_block_size >= 1
    assert 1 <= input_length <= ids.size * hash_block_size
    assert vocab_size > FIRST_TOKEN_ID
    return ids
