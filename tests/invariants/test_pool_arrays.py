"""The incremental pool check's array paths (issue 30): the changed blocks as one sorted
array, many blocks compared at once and a few as lists (same verdicts), and the hash
memory remembered in C, walked block by block only when a hash named other content."""

from __future__ import annotations

import numpy as np

from schedcheck.invariants.block_pool import BlockPoolChecker, free_id_array
from schedcheck.invariants.pool_delta import PoolDeltaChecker

NUM_BLOCKS = 128


class _Pool:
    """A KVSnapshot over plain lists; `bad_ref` plants ref_cnt errors; `changed` is the log."""

    block_size = 4
    num_blocks = NUM_BLOCKS
    reserved_block_ids = (0,)

    def __init__(self, tables: dict[str, list[int]]) -> None:
        self.tables = tables
        self.bad_ref: dict[int, int] = {}
        self.changed: list[int] = []

    def ref_cnt(self):
        out = np.zeros(NUM_BLOCKS, np.int64)
        for table in self.tables.values():
            np.add.at(out, table, 1)
        out[0] = 1  # the engine's own block
        for b, r in self.bad_ref.items():
            out[b] = r
        return out

    def free_block_ids(self):
        held = {b for t in self.tables.values() for b in t}
        return [b for b in range(1, NUM_BLOCKS) if b not in held]

    def cached_blocks(self):
        return {}

    def block_tables(self):
        return {rid: t for rid, t in self.tables.items() if t}

    def num_computed_tokens(self):
        return {rid: 4 * len(t) for rid, t in self.tables.items() if t}

    def take_changed_block_ids(self):
        changed, self.changed = self.changed, []
        return changed


def _check(checker, step, pool, changed):
    pool.changed = changed
    return checker.check(step, pool, set(pool.tables), {})


def test_changed_ids_are_sorted_distinct_in_range_and_not_reserved():
    checker = PoolDeltaChecker()
    pool = _Pool({"a": [1, 2]})
    assert _check(checker, 0, pool, []) == []  # the sweep: state synced
    held = checker.held.copy()
    checker._read_changed(pool, [9, 2, 9], [5, 1], [0, 5, 200, 7, -3, 127])
    ids = checker.changed
    assert ids.dtype == np.int64
    assert ids.tolist() == [1, 2, 5, 7, 9, 127]
    assert checker._marks.tolist() == [0] * NUM_BLOCKS  # the scratch left clean
    np.subtract.at(held, [9, 2, 9], 1)  # an id removed twice counts twice
    held[[5, 1]] += 1
    assert checker.held.tolist() == held.tolist()


def test_many_and_few_changed_blocks_give_the_same_verdicts():
    """A table grows by 40 blocks and by 2, clean; then the same planted ref_cnt error is
    found either way, worded by the full sweep."""
    for grown in (40, 2):
        checker = PoolDeltaChecker()
        pool = _Pool({"a": [1, 2]})
        assert _check(checker, 0, pool, []) == []
        new = list(range(3, 3 + grown))
        pool.tables["a"] += new
        assert _check(checker, 1, pool, new) == []
        assert (checker.num_sweeps, checker.num_blocks_checked) == (1, grown)
        assert int(checker.held.sum()) == 2 + grown and checker.num_free == NUM_BLOCKS - 3 - grown
        more = list(range(3 + grown, 5 + 2 * grown))
        pool.tables["a"] += more
        pool.bad_ref = {more[-1]: 2}
        out = _check(checker, 2, pool, more)
        assert [(v.invariant, v.block, v.expected, v.found, v.request_id) for v in out] == [
            ("block-pool.ref-cnt", more[-1], "1", "2", "a")
        ]
        assert checker.num_sweeps == 2


def test_a_block_lost_among_many_is_found_by_the_sweep():
    checker = PoolDeltaChecker()
    pool = _Pool({"a": list(range(1, 60))})
    assert _check(checker, 0, pool, []) == []
    pool.tables["a"] = []
    free_ids = pool.free_block_ids
    pool.free_block_ids = lambda: [b for b in free_ids() if b != 33]  # never queued again
    out = _check(checker, 1, pool, list(range(1, 60)))
    assert [(v.invariant, v.block) for v in out] == [("block-pool.leak", 33)]


def _contents(identities):
    def contents(block_ids):
        return np.array([identities[b] for b in block_ids.tolist()], np.uint64), np.ones(
            block_ids.size, bool
        )

    return contents


def test_new_hashes_are_remembered_in_order_and_a_hash_named_twice_is_compared():
    pool = BlockPoolChecker()
    contents = _contents({1: 11, 2: 12, 3: 11, 4: 14})
    hashes = [b"h1", b"h2", b"h1", b"h4"]  # blocks 1 and 3: one hash, one content
    assert pool.check_fresh(5, [1, 2, 3, 4], hashes, contents) == []
    assert pool.content_of_hash == {b"h1": 11, b"h2": 12, b"h4": 14}
    assert list(pool.hash_order) == [b"h1", b"h2", b"h4"]


def test_a_hash_naming_other_content_is_reported_first_and_later_ones_not_remembered():
    """Block 3 names h1 with content 13 (h1 named 11 before); h5, after it, is not
    remembered (the one-by-one walk stops at the first finding, as it always did)."""
    pool = BlockPoolChecker()
    pool.check_fresh(4, [1], [b"h1"], _contents({1: 11}))
    out = pool.check_fresh(5, [2, 3, 5], [b"h2", b"h1", b"h5"], _contents({2: 12, 3: 13, 5: 15}))
    assert [(v.invariant, v.block, v.expected, v.found) for v in out] == [
        ("block-pool.hash-content", 3, "identity 0xb", "identity 0xd")
    ]
    assert out[0].message == (
        "block 3's hash 6831 named other content before: equal hash, different tokens or parents"
    )
    assert pool.content_of_hash == {b"h1": 11, b"h2": 12}
    assert list(pool.hash_order) == [b"h1", b"h2"]


def test_a_free_queue_handed_as_an_array_gives_the_verdicts_of_the_list():
    """SGLang's snapshot hands its free slots as an int64 array (no Python int per slot):
    a double free, a leak and a referenced free block read exactly as from the list."""
    plants = {
        "double free": lambda free: [*free, free[0]],
        "leak": lambda free: [b for b in free if b != 40],
        "referenced yet free": lambda free: [*free, 1],
    }
    for name, plant in plants.items():
        verdicts = []
        for as_array in (False, True):
            checker = PoolDeltaChecker()
            pool = _Pool({"a": [1, 2]})
            free_ids = pool.free_block_ids
            queue = plant(free_ids())
            pool.free_block_ids = (
                (lambda q=queue: np.array(q, np.int64)) if as_array else (lambda q=queue: q)
            )
            out = checker.sweep(3, pool, {"a"}, {})
            verdicts.append([(v.invariant, v.block, v.message) for v in out])
        assert verdicts[0] == verdicts[1] and len(verdicts[0]) == 1, (name, verdicts)
    assert free_id_array(_Pool({})).tolist() == list(range(1, NUM_BLOCKS))
