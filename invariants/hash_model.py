"""The hash model: what the KV entry of each position *is*, and what a model would sample.

The KV entry of position p of a request is identified by a 64-bit hash of its tokens
[0..p] (and nothing else, so two requests with the same prefix share identities, exactly
as real KV entries are shareable):

    identity(p) = (term(0, t_0) + term(1, t_1) + ... + term(p, t_p)) mod 2**64
    term(i, t)  = mix64((t << 32) | i)

A request with a `cache_salt` starts its sum at `salt_identity(cache_salt)` instead of 0, so
KV built under one salt never passes for another's (GHSA-rm76-4mrf-v9r8). A prefix sum of a
fixed integer mix (SplitMix64's finalizer): vectorized with numpy
cumsum, incremental for appended tokens, and the same in every process. Identity 0 means
"never written" (an identity is 0 with probability 2**-64).

The sampled token after position p is `sample_token(identity(p))`, so the unchunked,
uncached run of a request alone is a pure function of its prompt (`unchunked_outputs`).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from schedcheck.engines.arrays import first_true
from schedcheck.traces.mix64 import mix64
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE, FIRST_TOKEN_ID

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
SAMPLE_SALT = np.uint64(0x5DEECE66D1B2C3A5)
POISON = np.uint64(0xA5A5_0000_5A5A_FFFF)  # xor-ed into entries computed from a wrong token
READ_POISON = np.uint64(0x0F0F_1234_F0F0_4321)  # xor-ed into samples after wrong reads
DRAFT = np.uint64(0xD2AF_7D2A_F7D2_AF7D)  # a drafter's KV entry: tokens not known yet
GROUP_SALT = np.uint64(0x6B76_6772_6F75_7000)  # "kvgroup": tags a KV-cache group's entries


SALTS_KEPT = 1024  # salt_identity's memory: salts are few (a tenant's, a user's)


@functools.cache  # a few groups; each step reads its groups' tags (about 8 us to mix one)
def group_tag(group: int) -> np.uint64:
    """xor-ed into the identities group `group` writes: each KV-cache group has its own
    layers, so the KV of one position differs per group (group 0's tag is 0: a one-group
    engine writes plain identities)."""
    assert group >= 0
    if group == 0:
        return np.uint64(0)
    return np.uint64(mix64(np.asarray([GROUP_SALT + np.uint64(group)], dtype=np.uint64))[0])


@functools.lru_cache(maxsize=SALTS_KEPT)
def salt_identity(cache_salt: str | None) -> int:
    """The identity a salted request's sum starts from (0 without a salt); a run's few
    salts are asked for again at every request's add and finish (a sha256 each)."""
    if cache_salt is None:
        return 0
    digest = hashlib.sha256(b"schedcheck-cache-salt:" + cache_salt.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


@functools.cache
def _kernels() -> Any:
    """hash_kernels.py, imported with the first call (it loads numba)."""
    from schedcheck.invariants import hash_kernels

    return hash_kernels


def _int_vectors(*arrays: object) -> bool:
    """All are 1-D integer arrays: the compiled loops' inputs."""
    return all(isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype.kind in "iu" for a in arrays)


def terms(positions: I64, tokens: I64) -> U64:
    """term(i, t) elementwise; positions and tokens are equal-length int arrays (1-D ones
    by the compiled loop of hash_kernels.py, which computes the same values)."""
    if _int_vectors(positions, tokens) and positions.size == tokens.size:
        return _kernels().terms(_as_int64(positions), _as_int64(tokens))
    keys = (tokens.astype(np.uint64) << np.uint64(32)) | positions.astype(np.uint64)
    return mix64(keys)


def identities(tokens: I64, start_identity: int | np.integer = 0, start_pos: int = 0) -> U64:
    """identity(start_pos + k) for each k, given identity(start_pos - 1) = start_identity
    (a 1-D array by the compiled loop of hash_kernels.py: the same values)."""
    if _int_vectors(tokens):
        start = np.uint64(start_identity)
        return _kernels().identities(_as_int64(tokens), start, np.int64(start_pos))
    positions = np.arange(start_pos, start_pos + tokens.size, dtype=np.int64)
    out = terms(positions, tokens)
    with np.errstate(over="ignore"):
        out[0:1] += np.uint64(start_identity)
        return np.cumsum(out, dtype=np.uint64)


def sample_tokens(identity: U64, vocab_size: int = DEFAULT_VOCAB_SIZE) -> I64:
    """The token a model samples after the position whose KV identity is given (a 1-D
    uint64 array by the compiled loop of hash_kernels.py: the same tokens)."""
    span = np.uint64(vocab_size - FIRST_TOKEN_ID)
    if isinstance(identity, np.ndarray) and identity.ndim == 1 and identity.dtype == np.uint64:
        return _kernels().sample_tokens(np.ascontiguousarray(identity), span, SAMPLE_SALT)
    return (mix64(identity ^ SAMPLE_SALT) % span).astype(np.int64) + FIRST_TOKEN_ID


def sample_chain(
    identity: int, start_pos: int, right: np.ndarray, offsets: np.ndarray, vocab_size: int
) -> I64:
    """Tokens sampled one after another after the position before `start_pos`, whose
    identity is given: token j is the sample after the sequence so far where right[j], else
    that token moved by offsets[j] (in [1, vocab_size - FIRST_TOKEN_ID)) among the ids
    after the special ones; each token's term extends the sequence (compiled loop). All
    right: the request run alone; else a drafter's drafts."""
    span = np.uint64(vocab_size - FIRST_TOKEN_ID)
    return cast(
        I64,
        _kernels().sample_chain(
            np.uint64(identity), np.int64(start_pos), right, _as_int64(offsets), span, SAMPLE_SALT
        ),
    )


def _as_int64(values: np.ndarray) -> I64:
    """The values as contiguous int64 (bits kept for uint64: what astype(uint64) reads)."""
    return np.ascontiguousarray(values, dtype=np.int64)


def unchunked_outputs(
    prompt: I64, num_outputs: int, vocab_size: int = DEFAULT_VOCAB_SIZE, salt: int = 0
) -> I64:
    """The outputs of the request run alone: whole prompt in one forward, no cache."""
    assert prompt.size >= 1 and num_outputs >= 0
    span = np.uint64(vocab_size - FIRST_TOKEN_ID)
    chain = _kernels().unchunked_chain
    return cast(I64, chain(_as_int64(prompt), num_outputs, np.uint64(salt), span, SAMPLE_SALT))


def outputs_consistent(
    prompt: I64, outputs: I64, vocab_size: int = DEFAULT_VOCAB_SIZE, salt: int = 0
) -> int:
    """Index of the first output that differs from the unchunked run, or -1 if none.

    Output k must be the sample after identity(len(prompt) + k - 1) of the sequence prompt
    + outputs, which holds iff it equals the unchunked output k given that every earlier
    output matched: the first difference from `unchunked_outputs` is the answer.
    """
    if outputs.size == 0:
        return -1
    expected = unchunked_outputs(prompt, int(outputs.size), vocab_size, salt)
    return first_true(expected != outputs, -1)
