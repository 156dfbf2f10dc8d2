"""The pools' per-block array helpers: the loop for a few ids and numpy for many give what
the fancy index gives, duplicate ids included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcheck.engines.reference.per_block import (
    FEW_IDS,
    add_at,
    any_at,
    id_array,
    ids_of,
    release_at,
    set_at,
)

NUM_BLOCKS = 64
ID_LISTS = st.lists(st.integers(0, NUM_BLOCKS - 1), max_size=2 * FEW_IDS + 4)


@given(ID_LISTS, st.integers(-3, 3))
def test_add_at_is_the_fancy_index(ids: list[int], delta: int) -> None:
    values = np.arange(NUM_BLOCKS, dtype=np.int64)
    want = values.copy()
    want[ids] += delta  # numpy adds once to an id listed twice
    add_at(values, ids, delta)
    assert values.tolist() == want.tolist()


@given(ID_LISTS)
def test_set_at_and_any_at_are_the_fancy_index(ids: list[int]) -> None:
    flags = np.zeros(NUM_BLOCKS, dtype=bool)
    set_at(flags, ids, True)
    assert np.flatnonzero(flags).tolist() == sorted(set(ids))
    assert any_at(flags, ids) is bool(ids)
    assert any_at(np.zeros(NUM_BLOCKS, bool), ids) is False


def test_few_and_many_ids_exact_values() -> None:
    few, many = [5, 2], list(range(10, 10 + FEW_IDS + 1))
    ref_cnt = np.ones(NUM_BLOCKS, dtype=np.int64)
    ref_cnt[2] = 2
    assert release_at(ref_cnt, few) == [5]  # block 2 keeps a holder
    assert (ref_cnt[5], ref_cnt[2]) == (0, 1)
    assert release_at(ref_cnt, many) == many
    assert not ref_cnt[many].any()
    counts = np.zeros(NUM_BLOCKS, dtype=np.int64)
    add_at(counts, [7, 7, 3], 2)
    assert (counts[7], counts[3]) == (2, 2)


@pytest.mark.parametrize("num_ids", [1, FEW_IDS + 1])
def test_release_at_refuses_a_double_free(num_ids: int) -> None:
    ref_cnt = np.zeros(NUM_BLOCKS, dtype=np.int64)
    with pytest.raises(AssertionError, match="double free"):
        release_at(ref_cnt, list(range(num_ids)))


@given(ID_LISTS, st.integers(-3, 3))
def test_ids_converted_once_give_what_the_list_gives(ids: list[int], delta: int) -> None:
    """ids_of: the list itself for a few ids, one int64 array for many; each helper reads
    either the same."""
    once = ids_of(ids)
    assert (once is ids) is (len(ids) <= FEW_IDS)
    by_list, by_once = np.arange(NUM_BLOCKS, dtype=np.int64), np.arange(NUM_BLOCKS, dtype=np.int64)
    add_at(by_list, ids, delta)
    add_at(by_once, once, delta)
    set_at(by_list, ids[:3], 0)
    set_at(by_once, ids_of(ids[:3]), 0)
    assert by_list.tolist() == by_once.tolist()
    assert any_at(by_list, ids) is any_at(by_once, once)


def test_id_array_converts_once_and_ids_of_takes_an_array_too() -> None:
    arr = np.array([4, 5], np.int64)
    assert id_array(arr) is arr
    assert id_array([3, 1]).tolist() == [3, 1] and id_array([3, 1]).dtype == np.int64
    assert id_array(np.array([2], np.int32)).dtype == np.int64
    assert id_array(()).tolist() == []
    assert ids_of(arr) == [4, 5]  # a few: the list the loops read
    many = np.arange(FEW_IDS + 1, dtype=np.int64)
    assert ids_of(many) is many  # many: the array itself, not copied
