"""The pool check's hash memory in arrays (issue 30) remembers, forgets and reports exactly
what the dict it replaced did: a dict walked in order is the oracle, over random steps with
repeated hashes, hashes that change content, hashes of several lengths (trailing zero bytes
included), a small bound, the ring growing and wrapping, and the index built again."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

from schedcheck.invariants import block_pool, hash_memory
from schedcheck.invariants.hash_memory import HashMemory


class _DictMemory:
    """What the pool check kept before: a dict in insertion order, walked one by one."""

    def __init__(self) -> None:
        self.seen: dict[bytes, int] = {}

    def forget_oldest(self, count: int) -> None:
        for _ in range(max(0, min(count, len(self.seen)))):  # bounded: count
            del self.seen[next(iter(self.seen))]

    def remember(self, keys: list[bytes], values: list[int]) -> tuple[int, int]:
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            first = self.seen.setdefault(key, value)
            if first != value:
                return i, first
        return -1, 0


def _random_key(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.7:  # a digest's length
        return rng.randbytes(32)
    if kind < 0.85:  # short, with trailing zeros sometimes: b"a" and b"a\0" differ
        return bytes([rng.randrange(3)]) + b"\0" * rng.randrange(3)
    return rng.randbytes(rng.choice([0, 7, 8, 9, 36, 70, 300]))  # 300: lengths past uint8


@pytest.mark.parametrize("seed", range(12))
def test_the_memory_walks_forgets_and_reports_as_the_dict_did(seed, monkeypatch):
    rng = random.Random(seed)
    bound = rng.choice([4, 16, 100, 1000])
    if seed % 2:  # the ring jumps to its bound's size early
        monkeypatch.setattr(hash_memory, "_SMALL_CAPACITY", 16)
    mine, oracle = HashMemory(max_size=bound if seed % 4 == 1 else 0), _DictMemory()
    pool = [_random_key(rng) for _ in range(rng.choice([20, 300, 3000]))]
    content = {k: rng.randrange(1, 1 << 64) for k in pool}
    for _ in range(300):  # bounded: steps
        n = rng.choice([0, 1, 2, 3, 8, 40, 200])
        keys = [rng.choice(pool) for _ in range(n)]
        values = [content[k] if rng.random() > 0.02 else rng.randrange(1 << 64) for k in keys]
        forget = len(oracle.seen) + n - bound
        mine.forget_oldest(forget)
        oracle.forget_oldest(forget)
        given = values if rng.random() < 0.5 else np.array(values, dtype=np.uint64)
        assert mine.remember(keys, given) == oracle.remember(keys, values)
        assert len(mine) == len(oracle.seen)
    assert list(mine) == list(oracle.seen)
    assert mine == oracle.seen
    assert [mine[k] for k in oracle.seen] == list(oracle.seen.values())
    gone = [k for k in pool if k not in oracle.seen]
    assert all(k not in mine for k in gone)
    assert mine.find(gone).tolist() == [0] * len(gone)


def test_a_long_run_at_the_bound_wraps_the_ring_and_rebuilds_the_index(monkeypatch):
    monkeypatch.setattr(block_pool, "HASH_MEMORY_MAX", 64)
    checker = block_pool.BlockPoolChecker()

    def contents(ids):
        return (ids * 7 + 1).astype(np.uint64), np.ones(ids.size, dtype=bool)

    for step in range(200):  # bounded: steps; each names 5 new hashes and 2 recent ones
        fresh = [*range(5 * step, 5 * step + 5), max(0, 5 * step - 3), 5 * step - 7]
        fresh = sorted({b for b in fresh if b >= 0})
        hashes = [b"%031d" % b + b"\0" for b in fresh]
        assert checker.check_fresh(step, fresh, hashes, contents) == []
        assert len(checker.content_of_hash) <= 64
    kept = checker.hash_order
    assert kept == [b"%031d" % b + b"\0" for b in range(995 - 64 + 5, 1000)][-len(kept) :]
    assert checker.content_of_hash[kept[-1]] == 999 * 7 + 1


def test_a_hash_costs_the_memory_about_60_bytes():
    memory = HashMemory()
    rng = random.Random(0)
    keys = [rng.randbytes(32) for _ in range(1 << 15)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for start in range(0, len(keys), 512):  # bounded: batches
        memory.remember(keys[start : start + 512], list(range(start, start + 512)))
    per_hash = (tracemalloc.get_traced_memory()[0] - before) / len(keys)
    tracemalloc.stop()
    assert per_hash < 64, per_hash  # a dict of bytes and ints: about 180
    assert memory[keys[12345]] == 12345 and len(memory) == len(keys)


def _colliding_keys() -> tuple[bytes, bytes]:
    """Two 8-byte keys whose mixes share their top 5 bits (one first cell of 32) and their
    low 27 bits (one tag beside a row of 4 bits): found among 2^20 keys, by numpy."""
    from schedcheck.invariants import hash_probe as hp

    words = np.random.default_rng(0).integers(0, 2**63, 2**20, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mix = (words * hp.MULTIPLIERS[0] ^ np.uint64(9) * hp.LENGTH_MULTIPLIER) * (
            hp.BUCKET_MULTIPLIER
        )
    cell_and_tag = (mix >> np.uint64(59)) << np.uint64(27) | (mix & np.uint64(2**27 - 1))
    order = np.argsort(cell_and_tag, kind="stable")
    same = np.flatnonzero(np.diff(cell_and_tag[order]) == 0)
    assert same.size, "a pair exists among 2^20 keys (about 128 expected)"
    a, b = words[order[same[0]]], words[order[same[0] + 1]]
    assert a != b
    return int(a).to_bytes(8, "little"), int(b).to_bytes(8, "little")


def test_keys_with_one_tag_and_one_first_cell_stay_apart():
    """A cell's tag only spares reading rows: two keys that share their first cell and
    their tag are still told apart by their bytes, in the kernels' probe and walk."""
    from schedcheck.invariants import hash_probe as hp

    a, b = _colliding_keys()
    table = np.zeros(32, np.int32)
    rows = np.zeros((9, 1), np.uint64)  # a ring of 8: rows take 4 bits, tags 27
    lens, values = np.zeros(9, np.uint8), np.zeros(8, np.uint64)
    query = np.frombuffer(a + b, np.uint64).reshape(2, 1).copy()
    query_lens = np.array([9, 9], np.int64)
    walked = hp.remember_walk(table, rows, lens, values, 0, 0, query[:1], query_lens[:1],
                              np.array([5], np.uint64))  # fmt: skip
    assert walked == (-1, 0, 1)
    found = np.zeros(2, np.int64)
    hp.find_rows(table, rows, lens, query, query_lens, found)
    assert found.tolist() == [1, 0]  # b shares a's cell and tag, not its row
    walked = hp.remember_walk(table, rows, lens, values, 0, 1, query, query_lens,
                              np.array([5, 7], np.uint64))  # fmt: skip
    assert walked == (-1, 0, 1)  # a compared (5 == 5), b appended
    hp.find_rows(table, rows, lens, query, query_lens, found)
    assert found.tolist() == [1, 2] and values[:2].tolist() == [5, 7]
    tags = (table[table != 0] >> 4).tolist()  # above each cell's 4 row bits
    assert len(tags) == 2 and tags[0] == tags[1]


def test_warm_reads_the_first_cells_and_writes_nothing():
    """The kernels' read-ahead pass counts the keys found at their first cell (a's twin b
    shares a's cell and tag, not its bytes; c is absent) and leaves every array as it was."""
    from schedcheck.invariants import hash_probe as hp

    a, b = _colliding_keys()
    c = (int.from_bytes(a, "little") ^ 1).to_bytes(8, "little")
    table = np.zeros(32, np.int32)
    rows = np.zeros((9, 1), np.uint64)
    lens, values = np.zeros(9, np.uint8), np.zeros(8, np.uint64)
    query = np.frombuffer(a + b + c, np.uint64).reshape(3, 1).copy()
    query_lens = np.array([9, 9, 9], np.int64)
    hp.remember_walk(table, rows, lens, values, 0, 0, query[:1], query_lens[:1],
                     np.array([5], np.uint64))  # fmt: skip
    before = [x.copy() for x in (table, rows, lens, values)]
    row_bits, cell_bits = hp.layout(table, rows)
    assert hp.warm(table, rows, lens, query, query_lens, row_bits, cell_bits) == 1
    assert hp.warm(table, rows, lens, query[1:], query_lens[1:], row_bits, cell_bits) == 0
    for now, then in zip((table, rows, lens, values), before, strict=True):
        assert np.array_equal(now, then)


def test_keys_as_words_are_the_keys_as_bytes():
    """remember_words of 32-byte keys as rows of 4 words walks, remembers and reports as
    remember of the same keys as bytes, also after a longer key widened the rows."""
    rng = random.Random(7)
    keys = [rng.randbytes(32) for _ in range(40)]
    values = np.arange(40, dtype=np.uint64)
    for widen in (False, True):
        by_bytes, by_words = HashMemory(), HashMemory()
        if widen:  # rows of 6 words: the words are zero-padded as bytes would be
            for memory in (by_bytes, by_words):
                assert memory.remember([b"x" * 41], [9]) == (-1, 0)
        words = np.frombuffer(b"".join(keys), np.uint64).reshape(40, 4)
        assert (
            by_words.remember_words(words[:30], values[:30])
            == by_bytes.remember(keys[:30], values[:30])
            == (-1, 0)
        )
        changed = values.copy()
        changed[35] = 99  # key 35 is new: remembered; key 3 names other content
        changed[3] = 77
        assert by_words.remember_words(words[20:], changed[20:]) == (-1, 0)
        assert by_bytes.remember(keys[20:], changed[20:]) == (-1, 0)
        assert by_words.remember_words(words[:5], changed[:5]) == (3, 3)
        assert by_bytes.remember(keys[:5], changed[:5]) == (3, 3)
        assert list(by_words) == list(by_bytes) and len(by_words) == 40 + widen
        assert [by_words[k] for k in keys] == [by_bytes[k] for k in keys]
