"""traces/tokens.py: hash ids expanded into tokens, compiled and in numpy, the same."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcheck.traces.tokens import (
    DEFAULT_VOCAB_SIZE,
    FIRST_TOKEN_ID,
    expand_hash_ids,
    expand_hash_ids_numpy,
)


def test_tokens_pinned() -> None:
    """The tokens of two hash ids of 4 tokens each, cut to 7 (values pinned before the
    compiled pass existed: a trace's prompts must not change)."""
    expected = [24715, 2847, 15687, 10722, 18599, 30339, 7100]
    assert expand_hash_ids((0, 14), 4, 7).tolist() == expected
    assert expand_hash_ids_numpy((0, 14), 4, 7).tolist() == expected


def test_large_ids_wrap_as_uint64() -> None:
    """A hash id past 2**63 shifts and wraps modulo 2**64 on both paths."""
    assert expand_hash_ids((2**63 + 5,), 3, 2, vocab_size=10).tolist() == [5, 3]
    assert expand_hash_ids_numpy((2**63 + 5,), 3, 2, vocab_size=10).tolist() == [5, 3]


def test_shared_ids_give_shared_prefix() -> None:
    a = expand_hash_ids((3, 9, 4), 16, 40)
    b = expand_hash_ids((3, 9, 5), 16, 48)
    assert a.dtype == np.int64 and a.shape == (40,) and b.shape == (48,)
    assert np.array_equal(a[:32], b[:32]) and not np.array_equal(a[32:40], b[32:40])


@pytest.mark.parametrize("input_length", [0, 9])
def test_bad_length_refused(input_length: int) -> None:
    """A length past the blocks, or none, is a caller's error on both paths."""
    for expand in (expand_hash_ids, expand_hash_ids_numpy):
        with pytest.raises(AssertionError):
            expand((1, 2), 4, input_length)


@given(
    hash_ids=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=6),
    hash_block_size=st.integers(1, 40),
    data=st.data(),
    vocab_size=st.sampled_from([FIRST_TOKEN_ID + 1, 50, DEFAULT_VOCAB_SIZE, 2**31]),
)
def test_compiled_equals_numpy(
    hash_ids: list[int], hash_block_size: int, data: st.DataObject, vocab_size: int
) -> None:
    input_length = data.draw(st.integers(1, len(hash_ids) * hash_block_size))
    got = expand_hash_ids(hash_ids, hash_block_size, input_length, vocab_size)
    want = expand_hash_ids_numpy(hash_ids, hash_block_size, input_length, vocab_size)
    assert got.dtype == want.dtype == np.int64
    assert got.tolist() == want.tolist()
    assert got.min() >= FIRST_TOKEN_ID and got.max() < vocab_size
