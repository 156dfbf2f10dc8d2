"""The hash model's passes compiled (numba): one loop where numpy made a dozen calls.

`hash_model.py` defines the values (a term per token, identities as its wrapping prefix
sum, a sample per identity); a request's identities or a step's samples are a few to a few
thousand elements, where numpy's per-call cost is most of the work. Each kernel computes
exactly those values: uint64 arithmetic wraps as numpy's does, and a token is taken as
its int64 bits (numpy's astype(uint64))::

    mix64(v)                 SplitMix64's finalizer of one uint64 (traces/token_kernel.py)
    term(position, token), sample_token(identity, span, salt)
                             the same of one element (the shadow KV's kernels call them)
    terms(positions, tokens) mix64((token << 32) | position), elementwise
    identities(tokens, start_identity, start_pos)
                             start_identity + the running sum of the terms of positions
                             start_pos, start_pos + 1, ...
    sample_tokens(identity, span, salt)
                             mix64(identity ^ salt) % span + FIRST_TOKEN_ID
                             (salt: hash_model.SAMPLE_SALT)
    sample_chain(identity, start_pos, right, offsets, span, salt)
                             tokens sampled one after another, each chained by its term:
                             the request run alone (all right), or the drafter's tokens
                             (a wrong one moved by an offset)
    unchunked_chain(prompt, num_outputs, start_identity, span, salt)
                             the outputs of a request run alone: sample_chain, all right,
                             after its prompt's identities

Imported by `hash_model` with the first call (numba loads with the first simulation, not
with the command line).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from schedcheck.traces.token_kernel import mix64
from schedcheck.traces.tokens import FIRST_TOKEN_ID

_FIRST_TOKEN = np.uint64(FIRST_TOKEN_ID)
_SHIFT = np.uint64(32)


@njit(cache=True, nogil=True)
def term(position, token):
    """term(position, token) of one position (uint64s: a token as its int64 bits)."""
    return mix64((token << _SHIFT) | position)


@njit(cache=True, nogil=True)
def sample_token(identity, span, salt):
    """The token (uint64) sampled after one identity, from a vocabulary of `span` ids
    after the special ones (`salt`: the hash model's sampling salt)."""
    return mix64(identity ^ salt) % span + _FIRST_TOKEN


@njit(cache=True, nogil=True)
def terms(positions, tokens):
    """term(positions[k], tokens[k]) for each k (int64 arrays of one length)."""
    out = np.empty(tokens.size, np.uint64)
    for k in range(tokens.size):  # bounded: the tokens
        out[k] = term(np.uint64(positions[k]), np.uint64(tokens[k]))
    return out


@njit(cache=True, nogil=True)
def identities(tokens, start_identity, start_pos):
    """identity(start_pos + k) for each token k, identity(start_pos - 1) being
    start_identity (uint64)."""
    out = np.empty(tokens.size, np.uint64)
    identity = start_identity
    for k in range(tokens.size):  # bounded: the tokens
        identity += term(np.uint64(start_pos + k), np.uint64(tokens[k]))
        out[k] = identity
    return out


@njit(cache=True, nogil=True)
def sample_tokens(identity, span, salt):
    """sample_token of each identity, as int64."""
    out = np.empty(identity.size, np.int64)
    for k in range(identity.size):  # bounded: the identities
        out[k] = np.int64(sample_token(identity[k], span, salt))
    return out


@njit(cache=True, nogil=True)
def sample_chain(identity, start_pos, right, offsets, span, salt):
    """Token j: the token sampled after `identity` extended by tokens 0..j-1 (their terms
    at positions start_pos, start_pos + 1, ...) where right[j], else that token moved by
    offsets[j] (in [1, span)) within the span of ids after the special ones."""
    out = np.empty(right.size, np.int64)
    last = identity
    for j in range(right.size):  # bounded: the tokens asked for
        token = sample_token(last, span, salt)
        if not right[j]:
            token = (token - _FIRST_TOKEN + np.uint64(offsets[j])) % span + _FIRST_TOKEN
        out[j] = np.int64(token)
        last += term(np.uint64(start_pos + j), token)
    return out


@njit(cache=True, nogil=True)
def unchunked_chain(prompt, num_outputs, start_identity, span, salt):
    """The first `num_outputs` outputs of `prompt` run alone: the sample chain, every
    token right, after the identity of the prompt's last position."""
    last = identities(prompt, start_identity, np.int64(0))[-1]
    every = np.ones(num_outputs, dtype=np.int64)
    return sample_chain(last, prompt.size, every != 0, every, span, salt)
