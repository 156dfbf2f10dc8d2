"""The pool check's compiled walk (pool_delta_kernels.py) and its hashes read as words:
exact on hand-built pools, equal to the generic path's numpy on random ones, and a whole
run (every regression bundle with its mutant and clean) reads the same with them as
without them (the snapshot's `pool_arrays` and `hash_words` taken away)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcheck.engines.reference.hashed_manager import HashedKVSnapshot
from schedcheck.fuzz.shrink import bundle_run
from schedcheck.invariants import pool_delta_kernels as k
from schedcheck.sim.loop import run

I64 = np.int64


def _a(*ids: int) -> np.ndarray:
    return np.array(ids, I64)


def test_changed_ids_are_distinct_sorted_in_range_and_not_reserved():
    marks = np.zeros(8, np.uint8)
    ids = k.changed_ids(marks, _a(5, 3), _a(3, 9, -1), _a(7, 5, 0, 7), _a(0), 8)
    assert ids.tolist() == [3, 5, 7]  # 9 and -1 out of range, 0 reserved, repeats once
    assert not marks.any()  # the scratch is left clean


def test_check_changed_reads_each_property_of_each_block():
    """Block 1: as kept. 2: referenced yet free (free-queue). 3: unreferenced, not free
    (lost). 4: ref_cnt 2 for one holder (ref-cnt), and its hash moved."""
    held = _a(0, 1, 1, 0, 1)
    free = np.array([True, False, False, True, False])
    seen = _a(0, 1, 0, 0, 3)
    ref_cnt, is_free = _a(0, 1, 1, 0, 2), np.array([True, False, True, False, False])
    changes = _a(0, 1, 0, 0, 4)
    suspect, delta, lost, rehashed = k.check_changed(
        held, free, seen, ref_cnt, is_free, changes, _a(1, 2, 3)
    )
    assert (suspect, delta, lost.tolist(), rehashed.tolist()) == (True, 0, [3], [])
    assert free.tolist() == [True, False, True, False, False]  # 2 now free, 3 not
    suspect, delta, lost, rehashed = k.check_changed(
        held, free, seen, ref_cnt, is_free, changes, _a(1, 4)
    )
    assert (suspect, delta, lost.tolist(), rehashed.tolist()) == (True, 0, [], [4])
    assert seen.tolist() == [0, 1, 0, 0, 4]
    suspect, *_ = k.check_changed(held, free, seen, ref_cnt, is_free, changes, _a(1))
    assert suspect is False


def test_fresh_rows_are_the_blocks_cached_now_with_their_words():
    """Of blocks 1, 2, 4 (their hash moved): 1 and 4 are cached now, 2 was evicted. The
    rows of 1 and 4 come back and are kept as checked; 2 is forgotten; 3 is untouched."""
    cached_now = np.array([False, True, False, True, True])
    words = np.arange(20, dtype=np.uint64).reshape(5, 4)
    checked_present = np.array([False, True, True, True, False])
    checked_words = np.full((5, 4), 7, np.uint64)
    fresh, fresh_words = k.fresh_rows(
        _a(1, 2, 4), cached_now, words, checked_present, checked_words
    )
    assert fresh.tolist() == [1, 4]
    assert fresh_words.tolist() == [[4, 5, 6, 7], [16, 17, 18, 19]]
    assert checked_present.tolist() == [False, True, False, True, True]
    assert checked_words.tolist() == [[7] * 4, [4, 5, 6, 7], [7] * 4, [7] * 4, [16, 17, 18, 19]]
    none, no_words = k.fresh_rows(_a(), cached_now, words, checked_present, checked_words)
    assert none.tolist() == [] and no_words.shape == (0, 4)


def _numpy_walk(held, free, seen, ref_cnt, is_free, changes, removed, added, logged, n):
    """What pool_delta.py's generic path computes, in plain numpy."""
    np.add.at(held, removed, -1)
    np.add.at(held, added, 1)
    ids = np.unique(np.concatenate([removed, added, logged]))
    ids = ids[(ids >= 0) & (ids < n)]
    r, f = ref_cnt[ids], is_free[ids]
    suspect = bool((r != held[ids]).any() or (f & (r > 0)).any())
    delta = int(f.sum()) - int(free[ids].sum())
    free[ids] = f
    moved = changes[ids] != seen[ids]
    seen[ids] = changes[ids]
    return ids, suspect, delta, ids[~f & (r == 0)], ids[moved]


@given(st.data())
def test_the_walk_equals_the_generic_path_on_random_pools(data):
    n = data.draw(st.integers(1, 40))
    arrays = st.lists(st.integers(0, 3), min_size=n, max_size=n)
    ids = st.lists(st.integers(-2, n + 1), max_size=12)
    held, seen = np.array(data.draw(arrays), I64), np.array(data.draw(arrays), I64)
    free = np.array([x % 2 == 0 for x in data.draw(arrays)])
    ref_cnt, changes = np.array(data.draw(arrays), I64), np.array(data.draw(arrays), I64)
    is_free = np.array([x == 0 for x in data.draw(arrays)])
    in_range = st.lists(st.integers(0, n - 1), max_size=12)
    removed, added = np.array(data.draw(in_range), I64), np.array(data.draw(in_range), I64)
    logged = np.array(data.draw(ids), I64)
    mine = [x.copy() for x in (held, free, seen)]
    want = _numpy_walk(*mine, ref_cnt, is_free, changes, removed, added, logged, n)
    got = k.step_blocks(held, free, seen, np.zeros(n, np.uint8), ref_cnt, is_free, changes,
                        removed, added, logged, np.zeros(0, I64))  # fmt: skip
    assert [x.tolist() if isinstance(x, np.ndarray) else x for x in got] == [
        x.tolist() if isinstance(x, np.ndarray) else x for x in want
    ]
    assert all(np.array_equal(a, b) for a, b in zip((held, free, seen), mine, strict=True))


BUNDLES = sorted((Path(__file__).parents[1] / "regressions" / "bundles").iterdir())


def _outcome(result):
    return result.fingerprint, [v.to_json() for v in result.violations], result.stuck


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_a_run_reads_the_same_with_the_walk_as_without_it(bundle, monkeypatch):
    parts, requests = bundle_run(bundle)
    options = dataclasses.replace(parts.options, keep_going=True)
    for mutant in (parts.config.mutant, None):
        config = dataclasses.replace(parts.config, mutant=mutant)
        walked = run(requests, parts.engine, config, options, parts.cost)
        with monkeypatch.context() as m:
            m.delattr(HashedKVSnapshot, "pool_arrays")
            m.delattr(HashedKVSnapshot, "hash_words")
            generic = run(requests, parts.engine, config, options, parts.cost)
        assert _outcome(walked) == _outcome(generic)
