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

DEFAULT_VOCAB_SIZE = 32_000
FIRST_TOKEN_ID = 3  # 0..2 are left to special tokens (pad, bos, eos)
# SplitMix64's finalizer constants (mix64; invariants/hash_kernels.py compiles the same mix)
MIX64_M1 = np.uint64(0xBF58476D1CE4E5B9)
MIX64_M2 = np.uint64(0x94D049BB133111EB)
MIX64_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
HASH_ID_SHIFT = 20  # token j of hash id h is keyed by h * 2**HASH_ID_SHIFT + j


_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)


def mix64(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finalizer, elementwise; wraps modulo 2**64. An array's integer
    arithmetic wraps silently, so it is done in place on one copy; a scalar's would warn,
    so it runs under an error state that ignores the overflow (the same values)."""
    if not isinstance(values, np.ndarray) or values.ndim == 0:
        with np.errstate(over="ignore"):
            z = values + MIX64_GOLDEN
            z = (z ^ (z >> _S30)) * MIX64_M1
            z = (z ^ (z >> _S27)) * MIX64_M2
            return z ^ (z >> _S31)
    z = values + MIX64_GOLDEN
    z ^= z >> _S30
    z *= MIX64_M1
    z ^= z >> _S27
    z *= MIX64_M2
    z ^= z >> _S31
    return z


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
    return token_kernel.expand(ids, hash_block_size, input_length, span)


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
