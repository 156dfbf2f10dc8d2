"""The full pool check's counts in one compiled pass: the same counts and first findings as
numpy's bincounts and masks, exact values, and ids outside the pool refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcheck.invariants.pool_census import take_census

N = 8
I64 = np.int64


def _arr(ids: list[int]) -> np.ndarray:
    return np.array(ids, dtype=I64)


def _numpy_census(table_ids, ref_cnt, free_ids, cached_ids, reserved):
    """What block_pool.py computed with numpy before the pass was compiled."""
    inside = table_ids[(table_ids >= 0) & (table_ids < N)]
    held = np.bincount(inside, minlength=N)
    counts = np.bincount(free_ids, minlength=N) if free_ids.size else np.zeros(N, I64)
    wrong = ref_cnt != held
    wrong[reserved] = False
    lost = (counts == 0) & (ref_cnt == 0)
    lost[reserved] = False
    lost[cached_ids] = False
    masks = (wrong, counts > 1, (counts > 0) & (ref_cnt > 0), lost)
    firsts = [int(np.flatnonzero(m)[0]) if m.any() else -1 for m in masks]
    return held, counts, firsts


IDS = st.lists(st.integers(-2, N + 1), max_size=12)
IN_POOL = st.lists(st.integers(0, N - 1), max_size=12)
KEPT = st.lists(st.integers(-N, N - 1), max_size=3)


@given(IDS, st.lists(st.integers(0, 3), min_size=N, max_size=N), IN_POOL, KEPT, KEPT)
def test_the_counts_and_first_findings_are_numpys(tables, ref_cnt, free, cached, reserved):
    args = (_arr(tables), _arr(ref_cnt), _arr(free), _arr(cached), _arr(reserved))
    census = take_census(0, *args, N)
    held, counts, firsts = _numpy_census(*args)
    assert census.held.tolist() == held.tolist() and census.counts.tolist() == counts.tolist()
    found = [
        [v.block for v in census.ref_cnt_findings],
        [v.block for v in census.free_queue_findings if "times" in v.message],
        [v.block for v in census.free_queue_findings if "with ref_cnt" in v.message],
        [v.block for v in census.free_queue_findings if v.invariant == "block-pool.leak"],
    ]
    assert found == [[b] if b >= 0 else [] for b in firsts]


def test_exact_findings_of_a_small_pool():
    # block 1: two holders, ref_cnt 1; block 2: free twice; block 3: free with ref_cnt 1;
    # block 4: ref_cnt 0, neither free nor cached; block 5 likewise but cached; 6 reserved
    census = take_census(
        7, _arr([1, 1, 3, 0]), _arr([1, 1, 0, 1, 0, 0, 0, 0]),
        _arr([2, 2, 3, 7]), _arr([5]), _arr([6]), N,
    )  # fmt: skip
    assert census.held.tolist() == [1, 2, 0, 1, 0, 0, 0, 0]
    assert census.counts.tolist() == [0, 0, 2, 1, 0, 0, 0, 1]
    wrong = census.ref_cnt_findings
    assert [(v.invariant, v.step, v.block, v.expected, v.found) for v in wrong] == [
        ("block-pool.ref-cnt", 7, 1, "2", "1")
    ]
    assert [v.message for v in census.free_queue_findings] == [
        "block 2 is in the free queue 2 times",
        "block 3 is in the free queue with ref_cnt 1: a referenced block could be evicted",
        "block 4 has ref_cnt 0 but is neither free nor cached: it can never be allocated again",
    ]


def test_a_negative_reserved_id_counts_from_the_end_as_numpy_indexes():
    census = take_census(0, _arr([]), _arr([0] * N), _arr(list(range(N - 1))), _arr([]),
                         _arr([-1]), N)  # fmt: skip
    assert census.free_queue_findings == []  # block N - 1: reserved, not lost


@pytest.mark.parametrize(
    ("free", "cached", "reserved", "error"),
    [([N], [], [], ValueError), ([-1], [], [], ValueError), ([], [N], [], IndexError),
     ([], [], [-N - 1], IndexError)],
)  # fmt: skip
def test_an_id_outside_the_pool_is_refused(free, cached, reserved, error):
    with pytest.raises(error, match="outside the pool"):
        take_census(0, _arr([]), _arr([0] * N), _arr(free), _arr(cached), _arr(reserved), N)


def test_a_ref_cnt_of_another_size_is_refused():
    with pytest.raises(ValueError, match="ref_cnt has 3 entries for a pool of 8 blocks"):
        take_census(0, _arr([]), _arr([0, 0, 0]), _arr([]), _arr([]), _arr([]), N)
