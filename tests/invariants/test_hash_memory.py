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
