"""The incremental pool check's own bookkeeping, on a hand-built pool of 8 blocks: tables
that vanish after a full sweep, and tables whose blocks leave from the middle (a
concatenation of KV-cache groups, a sliding window freeing blocks before its window)."""

from __future__ import annotations

import numpy as np

from schedcheck.invariants.pool_delta import PoolDeltaChecker

NUM_BLOCKS = 8


class _Pool:
    """A KVSnapshot over plain lists; `changed` is what the engine's change log says."""

    block_size = 4
    num_blocks = NUM_BLOCKS

    def __init__(self, tables: dict[str, list[int]], rewritten: tuple[str, ...] = ()) -> None:
        self.tables = tables
        self.rewritten = rewritten
        self.changed: list[int] = []

    def ref_cnt(self):
        out = np.zeros(NUM_BLOCKS, np.int64)
        for table in self.tables.values():
            out[table] += 1
        return out

    def free_block_ids(self):
        held = {b for t in self.tables.values() for b in t}
        return [b for b in range(NUM_BLOCKS) if b not in held]

    def cached_blocks(self):
        return {}

    def block_tables(self):
        return {rid: t for rid, t in self.tables.items() if t}

    def num_computed_tokens(self):
        return {rid: 4 * len(t) for rid, t in self.tables.items() if t}

    def take_changed_block_ids(self):
        changed, self.changed = self.changed, []
        return changed

    def take_rewritten_req_ids(self):
        return self.rewritten


def _check(checker: PoolDeltaChecker, step: int, pool: _Pool, changed: list[int]):
    pool.changed = changed
    return checker.check(step, pool, set(pool.tables), {})


def test_every_table_gone_after_a_sweep_is_a_clean_step():
    """Step 0 sweeps (the log turns on), step 1 diffs two tables, step 2 finds a ref_cnt the
    kept state does not explain (its copy of a table is stale) and sweeps, step 3 has no
    table at all: the kept lengths of step 1 must not be compared with nothing."""
    checker = PoolDeltaChecker()
    pool = _Pool({"a": [0, 1], "b": [2]})
    assert _check(checker, 0, pool, []) == []
    pool.tables["a"].append(3)
    assert _check(checker, 1, pool, [3]) == []
    pool.tables["a"][1] = 4  # [0, 4, 3]: rewritten in place, unannounced
    assert _check(checker, 2, pool, [1, 4]) == []
    assert (checker.num_sweeps, checker.num_unconfirmed) == (2, 1)  # swept, rebuilt
    pool.tables = {}
    assert _check(checker, 3, pool, [0, 2, 3, 4]) == []
    assert (checker.num_sweeps, checker.held.tolist()) == (2, [0] * NUM_BLOCKS)


def test_tables_dropped_and_admitted_in_one_step_are_followed_without_a_sweep():
    """Request a finishes while c is admitted after b (a dict's order), then b finishes,
    then the tables come in another order: each step is followed (held as the tables
    say, no sweep, nothing unconfirmed), the first two without diffing every table."""
    checker = PoolDeltaChecker()
    pool = _Pool({"a": [0, 1], "b": [2]})
    assert _check(checker, 0, pool, []) == []  # the sweep
    assert _check(checker, 1, pool, []) == []  # every table diffed once after it
    diffed_all = []
    diff_all = checker.kept._diff_all
    checker.kept._diff_all = lambda *args: diffed_all.append(True) or diff_all(*args)
    pool.tables = {"b": [2, 5], "c": [3, 4]}  # a dropped, b grown, c new
    assert _check(checker, 2, pool, [0, 1, 3, 4, 5]) == []
    pool.tables = {"c": [3, 4]}  # b dropped, c unchanged
    assert _check(checker, 3, pool, [2, 5]) == []
    assert diffed_all == []
    assert checker.held.tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
    pool.tables = {"d": [6], "c": [3, 4, 7]}  # a new table before c: every table diffed
    assert _check(checker, 4, pool, [6, 7]) == []
    assert diffed_all == [True]
    assert checker.held.tolist() == [0, 0, 0, 1, 1, 0, 1, 1]
    assert (checker.num_sweeps, checker.num_unconfirmed) == (1, 0)


def test_a_dropped_table_whose_blocks_stay_held_is_found():
    """Request a's table leaves the engine's tables but its blocks keep their ref_cnt (a
    leak of holders): the dropped table's blocks are checked, ref_cnt and the tables
    disagree, and the sweep says which block (the fake's free list, from the tables, also
    names them free while referenced)."""
    checker = PoolDeltaChecker()
    pool = _Pool({"a": [0, 1], "b": [2]})
    assert _check(checker, 0, pool, []) == []
    assert _check(checker, 1, pool, []) == []
    ref_cnt = pool.ref_cnt()
    pool.tables = {"b": [2]}
    pool.ref_cnt = lambda: ref_cnt  # a's blocks still counted
    found = _check(checker, 2, pool, [0, 1])
    assert "block-pool.ref-cnt" in [v.invariant for v in found]
    assert checker.num_sweeps == 2 and checker.num_unconfirmed == 0  # the sweep confirmed


def test_a_table_losing_a_middle_block_is_followed_when_named_rewritten():
    """Request a's table is group 0 [0, 1] then group 1 [2, 3]; group 0 grows by block 4 and
    group 1 frees block 2 (before its window): [0, 1, 4, 3], same length, same first and
    last block. Named rewritten, it is compared whole and nothing is swept."""
    checker = PoolDeltaChecker()
    pool = _Pool({"a": [0, 1, 2, 3]}, rewritten=("a",))
    assert _check(checker, 0, pool, []) == []
    pool.tables["a"] = [0, 1, 4, 3]
    assert _check(checker, 1, pool, [2, 4]) == []
    assert (checker.num_sweeps, checker.num_unconfirmed) == (1, 0)
    assert checker.held.tolist() == [1, 1, 0, 1, 1, 0, 0, 0]


class _CachedPool(_Pool):
    """_Pool with a prefix cache, an engine's count of each block's hash changes, and a
    count of the hashes the check read."""

    def __init__(self, tables: dict[str, list[int]], cached: dict[int, bytes]) -> None:
        super().__init__(tables)
        self.cached = cached
        self.hash_changes = np.zeros(NUM_BLOCKS, np.int64)
        self.hashes_read = 0

    def cached_blocks(self):
        return self.cached

    def hash_of(self, ids):
        self.hashes_read += ids.size
        return [self.cached.get(b) for b in ids.tolist()]

    def hash_changes_of(self, ids):
        return self.hash_changes[ids]


def _contents(ids):
    return (ids * 7 + 1).astype(np.uint64), np.ones(ids.size, dtype=bool)


def test_a_changed_block_whose_hash_count_did_not_move_is_not_read_again():
    """Blocks 0 and 1 are cached under h0 and h1. Step 1 changes their ref_cnt only: no
    hash is read. Step 2 caches block 1 under h0, which named block 0's content: counted,
    it is read and found. Step 3 (a fresh check) does the same without counting it: the
    step misses it, as the protocol says (every change must count), and the full sweep
    that ends a run finds it."""
    h0, h1 = b"h0".ljust(32, b"\0"), b"h1".ljust(32, b"\0")
    for counted in (True, False):
        checker = PoolDeltaChecker()
        pool = _CachedPool({"a": [0, 1]}, {0: h0, 1: h1})
        pool.changed = []
        assert checker.check(0, pool, {"a"}, _contents) == []  # the first check sweeps
        pool.tables["b"] = [0, 1]
        pool.changed = [0, 1]
        assert checker.check(1, pool, {"a", "b"}, _contents) == []
        assert pool.hashes_read == 0
        pool.cached[1] = h0
        pool.hash_changes[1] += counted
        pool.changed = [1]
        found = checker.check(2, pool, {"a", "b"}, _contents)
        if counted:
            assert [v.invariant for v in found] == ["block-pool.hash-content"]
            assert pool.hashes_read == 1
            continue
        assert found == [] and pool.hashes_read == 0
        swept = checker.sweep(3, pool, {"a", "b"}, _contents)
        assert "block-pool.hash-content" in [v.invariant for v in swept]


def test_a_block_whose_hash_changed_and_came_back_is_checked_again():
    """Block 1 is cached under h1. Within one step it is evicted, written with other
    content and cached under h1 again: its count moved by two, its hash reads as before.
    The check reads it again and finds h1 naming other content (comparing hashes alone
    would have skipped it)."""
    h1 = b"h1".ljust(32, b"\0")
    checker = PoolDeltaChecker()
    pool = _CachedPool({"a": [0, 1]}, {1: h1})
    pool.changed = []
    assert checker.check(0, pool, {"a"}, _contents) == []
    pool.hash_changes[1] += 2
    pool.changed = [1]

    def rewritten(ids):
        identity, complete = _contents(ids)
        return identity + (ids == 1), complete

    found = checker.check(1, pool, {"a"}, rewritten)
    assert [(v.invariant, v.block) for v in found] == [("block-pool.hash-content", 1)]
    assert pool.hashes_read == 1
