"""invariants/hash_kernels.py: the compiled hash-model loops give exactly the values of the
numpy formulation hash_model.py documents (and still runs for inputs that are not 1-D
integer arrays): wrapping sums, negative and narrow token dtypes, empty inputs."""

from __future__ import annotations

import numpy as np
import pytest

from schedcheck.invariants import hash_model
from schedcheck.traces.mix64 import mix64
from schedcheck.traces.tokens import FIRST_TOKEN_ID

U64_MAX = 2**64 - 1


def numpy_terms(positions, tokens):
    return mix64((tokens.astype(np.uint64) << np.uint64(32)) | positions.astype(np.uint64))


def numpy_identities(tokens, start_identity=0, start_pos=0):
    out = numpy_terms(np.arange(start_pos, start_pos + tokens.size, dtype=np.int64), tokens)
    with np.errstate(over="ignore"):
        out[0:1] += np.uint64(start_identity)
        return np.cumsum(out, dtype=np.uint64)


def numpy_samples(identity, vocab_size):
    span = np.uint64(vocab_size - FIRST_TOKEN_ID)
    return (mix64(identity ^ hash_model.SAMPLE_SALT) % span).astype(np.int64) + FIRST_TOKEN_ID


@pytest.mark.parametrize("size", [0, 1, 2, 17, 4096])
def test_each_kernel_equals_the_numpy_formulation(size):
    rng = np.random.default_rng(size)
    tokens = rng.integers(-3, 2**40, size)  # negative: the int64 bits, as astype(uint64)
    positions = rng.integers(0, 2**32, size)
    assert np.array_equal(hash_model.terms(positions, tokens), numpy_terms(positions, tokens))
    for start in (0, 1, U64_MAX):  # the sum wraps at 2**64
        got = hash_model.identities(tokens, start, 9)
        assert got.dtype == np.uint64 and np.array_equal(got, numpy_identities(tokens, start, 9))
    identity = rng.integers(0, 2**63, size).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    got = hash_model.sample_tokens(identity, 32_000)
    assert got.dtype == np.int64 and np.array_equal(got, numpy_samples(identity, 32_000))


def test_narrow_and_unsigned_token_dtypes_give_the_int64_values():
    tokens = np.array([3, 65_535, 0, 7], dtype=np.uint16)  # the reference engine's prompts
    want = numpy_identities(tokens.astype(np.int64), 5)
    assert np.array_equal(hash_model.identities(tokens, 5), want)
    wide = np.array([U64_MAX, 2**63], dtype=np.uint64)  # int64 bits kept
    at = np.array([0, 1], dtype=np.int64)
    assert np.array_equal(hash_model.terms(at, wide), numpy_terms(at, wide))


def test_inputs_that_are_not_1d_integer_arrays_take_the_numpy_path():
    identity = np.array([[1, 2], [3, 4]], dtype=np.uint64)
    assert np.array_equal(hash_model.sample_tokens(identity), numpy_samples(identity, 32_000))
    assert hash_model.sample_tokens(identity).shape == (2, 2)
    one = np.uint64(12345)  # a scalar identity: a scalar sample, as before
    assert int(hash_model.sample_tokens(one)) == int(numpy_samples(np.array([one]), 32_000)[0])


def _sample_chain_numpy(identity, start_pos, right, offsets, vocab_size):
    """The chain one token at a time, by hash_model's numpy formulation."""
    span = vocab_size - FIRST_TOKEN_ID
    last = np.asarray([identity], dtype=np.uint64)
    drafts = []
    for j in range(right.size):
        true = int(hash_model.sample_tokens(last, vocab_size)[0])
        token = (
            true if right[j] else (true - FIRST_TOKEN_ID + int(offsets[j])) % span + FIRST_TOKEN_ID
        )
        drafts.append(token)
        with np.errstate(over="ignore"):
            last = last + hash_model.terms(np.array([start_pos + j]), np.array([token]))
    return drafts


@pytest.mark.parametrize("seed", range(6))
def test_sample_chain_is_the_chain_one_token_at_a_time(seed):
    rng = np.random.default_rng(seed)
    vocab_size = int(rng.integers(FIRST_TOKEN_ID + 2, 50_000))
    k = int(rng.integers(1, 8))
    right = rng.random(k) < 0.5
    offsets = rng.integers(1, vocab_size - FIRST_TOKEN_ID, size=k)
    identity, start_pos = int(rng.integers(0, 2**64, dtype=np.uint64)), int(rng.integers(0, 9000))
    want = _sample_chain_numpy(identity, start_pos, right, offsets, vocab_size)
    got = hash_model.sample_chain(identity, start_pos, right, offsets, vocab_size)
    assert got.tolist() == want
    assert all(FIRST_TOKEN_ID <= t < vocab_size for t in want)


@pytest.mark.parametrize("seed", range(8))
def test_outputs_consistent_is_the_first_output_the_unchunked_run_would_not_give(seed):
    """Against the vectorized formulation (each output the sample after the identity
    before it in prompt + outputs): outputs of the request run alone (`unchunked_outputs`,
    the compiled chain), left as they are or changed at one random output (then that output
    is the first mismatch, whichever way the later ones go)."""
    rng = np.random.default_rng(seed)
    vocab_size, salt = int(rng.integers(300, 50_000)), int(rng.integers(0, 2**63))
    prompt = rng.integers(FIRST_TOKEN_ID, vocab_size, int(rng.integers(1, 60)))
    outputs = hash_model.unchunked_outputs(prompt, int(rng.integers(1, 30)), vocab_size, salt)
    bad = int(rng.integers(0, outputs.size)) if seed % 2 else -1  # -1: none changed
    if bad >= 0:
        outputs[bad] = FIRST_TOKEN_ID + (outputs[bad] + 1 - FIRST_TOKEN_ID) % (
            vocab_size - FIRST_TOKEN_ID
        )
    ids = hash_model.identities(np.concatenate([prompt, outputs[:-1]]), salt)
    mismatch = np.flatnonzero(
        hash_model.sample_tokens(ids[prompt.size - 1 :], vocab_size) != outputs
    )
    want = int(mismatch[0]) if mismatch.size else -1
    assert want == bad
    assert hash_model.outputs_consistent(prompt, outputs, vocab_size, salt) == want
    assert hash_model.outputs_consistent(prompt, outputs[:0], vocab_size, salt) == -1


def test_group_tags_are_the_mixed_group_salt_remembered():
    """Group 0 writes plain identities; group g's tag is mix64(GROUP_SALT + g), the same
    value (and type) at every call."""
    assert hash_model.group_tag(0) == 0
    for group in (1, 2, 3):
        want = mix64(np.asarray([hash_model.GROUP_SALT + np.uint64(group)], dtype=np.uint64))[0]
        first, again = hash_model.group_tag(group), hash_model.group_tag(group)
        assert first == want and again == want and isinstance(again, np.uint64)
    assert len({int(hash_model.group_tag(g)) for g in range(8)}) == 8
