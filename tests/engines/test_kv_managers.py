"""The KVCacheManager interface, for both managers, called directly (no scheduler)."""

from __future__ import annotations

import pytest
from refengine_helpers import request

from schedcheck.engines.reference.block_hash import BlockHasher
from schedcheck.engines.reference.hashed_manager import HashedKVManager
from schedcheck.engines.reference.kv_manager import EMPTY_HIT
from schedcheck.engines.reference.radix_manager import RadixKVManager
from schedcheck.engines.reference.request import Request

BLOCK_SIZE = 4


def _manager(kind: str, num_blocks: int = 6):
    cls = HashedKVManager if kind == "hashed" else RadixKVManager
    return cls(num_blocks, BLOCK_SIZE, True)


def _req(rid: str, prompt, max_tokens: int = 4, seq: int = 0) -> Request:
    return Request(request(rid, prompt, max_tokens), BlockHasher(BLOCK_SIZE), seq)


def _state(manager):
    snapshot = manager.kv_snapshot()
    return (
        snapshot.ref_cnt().tolist(),
        list(snapshot.free_block_ids()),
        {k: list(v) for k, v in snapshot.block_tables().items()},
        dict(snapshot.cached_blocks()),
    )


def _run_chunk(manager, req: Request, num_new_tokens: int, hit=EMPTY_HIT) -> None:
    assert manager.allocate_slots(req, num_new_tokens, hit)
    req.num_computed_tokens += hit.num_tokens
    req.num_computed_tokens = manager.cache_blocks(req, req.num_computed_tokens + num_new_tokens)


@pytest.mark.parametrize("kind", ["hashed", "radix"])
def test_failed_allocation_changes_nothing(kind):
    manager = _manager(kind, num_blocks=5)
    a = _req("A", range(8), seq=0)
    _run_chunk(manager, a, 8)
    manager.free(a)
    b = _req("B", [*range(8), 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9], seq=1)
    hit = manager.get_computed_blocks(b)
    assert (hit.block_ids, hit.num_tokens) == ((0, 1), 8)
    before = _state(manager)
    assert not manager.allocate_slots(b, 16, hit)  # 2 hit + 4 new blocks > 5 free or evictable
    assert _state(manager) == before
    assert manager.allocate_slots(b, 12, hit)  # 2 hit + 3 new blocks
    assert manager.block_table("B") == (0, 1, 2, 3, 4)


@pytest.mark.parametrize("kind", ["hashed", "radix"])
def test_hit_is_capped_at_num_tokens_minus_one(kind):
    manager = _manager(kind)
    a = _req("A", range(12))
    _run_chunk(manager, a, 12)
    manager.free(a)
    for prompt_len, expected in [(12, 8), (13, 12), (5, 4), (4, 0)]:
        hit = manager.get_computed_blocks(_req("X", range(prompt_len)))
        assert hit.num_tokens == expected == len(hit.block_ids) * BLOCK_SIZE, prompt_len


@pytest.mark.parametrize("kind", ["hashed", "radix"])
def test_lookahead_slots_are_allocated_past_the_chunk_and_never_cached(kind):
    """Tokens 0..5 + 3 draft slots = 9 slots = 3 blocks; the decode of position 6 (+3: 10
    slots) fits them; only full, written blocks are cached, never a block of drafts."""
    manager = _manager(kind)
    a = _req("A", range(6))
    assert manager.allocate_slots(a, 6, EMPTY_HIT, 3)
    assert manager.block_table("A") == (0, 1, 2)
    a.num_computed_tokens = manager.cache_blocks(a, 6)
    assert manager.allocate_slots(a, 1, EMPTY_HIT, 3)
    assert manager.block_table("A") == (0, 1, 2)
    a.num_computed_tokens = manager.cache_blocks(a, 7)
    assert manager.allocate_slots(a, 1, EMPTY_HIT, 3)  # 8 + 3 = 11 slots: still 3 blocks
    assert manager.allocate_slots(a, 2, EMPTY_HIT, 3)  # 9 + 3 = 12 slots: still 3 blocks
    assert manager.allocate_slots(a, 3, EMPTY_HIT, 3)  # 10 + 3 = 13 slots: a fourth block
    assert manager.block_table("A") == (0, 1, 2, 3)
    if kind == "hashed":
        assert set(manager.kv_snapshot().cached_blocks()) == {0}  # tokens 0..3 only
    manager.free(a)
    assert manager.num_free_blocks() == 6  # free, or cached and evictable: nothing leaked


@pytest.mark.parametrize("kind", ["hashed", "radix"])
def test_free_of_a_request_without_blocks_is_a_no_op(kind):
    manager = _manager(kind)
    before = _state(manager)
    manager.free(_req("nobody", range(3)))
    manager.free(_req("nobody", range(3)), aborted=True)
    assert _state(manager) == before and manager.num_computed_tokens_of("nobody") == -1


def test_hashed_lookup_is_memoized_until_the_cache_changes():
    manager = _manager("hashed")
    a = _req("A", range(8))
    _run_chunk(manager, a, 8)
    manager.free(a)
    b = _req("B", range(12), seq=1)
    first = manager.get_computed_blocks(b)
    assert manager.get_computed_blocks(b) is first
    manager.block_pool.get_new_blocks(6)  # takes every free block: evicts blocks 0 and 1
    again = manager.get_computed_blocks(b)
    assert (first.num_tokens, again.num_tokens) == (8, 0)


def test_hashed_lookup_grows_past_its_old_hit_while_no_hit_block_was_evicted():
    manager = _manager("hashed", num_blocks=8)
    a = _req("A", range(8))
    _run_chunk(manager, a, 8)  # blocks 0, 1 cached
    manager.free(a)
    b = _req("B", range(16), seq=1)
    first = manager.get_computed_blocks(b)
    assert (first.block_ids, first.num_tokens) == ((0, 1), 8)
    c = _req("C", range(12), seq=2)
    _run_chunk(manager, c, 4, manager.get_computed_blocks(c))  # caches block 2 (tokens 8..12)
    grown = manager.get_computed_blocks(b)
    assert (grown.block_ids, grown.num_tokens) == ((0, 1, 2), 12)
    manager._hit_memo.clear()  # a walk from scratch finds the same hit
    assert manager.get_computed_blocks(b).block_ids == grown.block_ids


def test_hashed_lookup_walks_again_from_the_first_hit_block_evicted(monkeypatch):
    manager = _manager("hashed", num_blocks=6)
    starts = []
    walk = manager._longest_hit

    def recorded(block_hashes, max_num_blocks, start=0):
        starts.append(start)
        return walk(block_hashes, max_num_blocks, start)

    monkeypatch.setattr(manager, "_longest_hit", recorded)
    a = _req("A", range(8))
    _run_chunk(manager, a, 8)  # blocks 0, 1 cached, then free (1 at the queue's head)
    manager.free(a)
    b = _req("B", range(12), seq=1)
    assert manager.get_computed_blocks(b).block_ids == (0, 1)
    evicted = manager.block_pool.get_new_blocks(3)  # blocks 2 3 4 5 were free before 1, 0
    assert evicted == [2, 3, 4]
    assert manager.get_computed_blocks(b).block_ids == (0, 1)  # none of its blocks went
    manager.block_pool.get_new_blocks(2)  # 5, then 1: block 1's hash is evicted
    assert manager.block_pool.evictions_of_block[1] == 1
    starts.clear()
    assert manager.get_computed_blocks(b).block_ids == (0,)  # block 0's hash is still cached
    assert starts == [1]  # the walk starts at block 1, the first evicted since
    manager._hit_memo.clear()  # a walk from scratch finds the same hit
    assert manager.get_computed_blocks(b).block_ids == (0,) and starts == [1, 0]


def test_radix_decode_pages_join_the_tree_at_finish():
    manager = _manager("radix", num_blocks=8)
    a = _req("A", range(6), max_tokens=8)
    _run_chunk(manager, a, 6)
    assert sorted(manager.kv_snapshot().cached_blocks()) == [0]
    for token in (100, 101, 102):  # decode: 7, 8, 9 tokens
        a.append_output_token(token)
        _run_chunk(manager, a, 1)
    assert a.num_computed_tokens == 9 and manager.block_table("A") == (0, 1, 2)
    assert sorted(manager.kv_snapshot().cached_blocks()) == [0]  # page 1 full, not inserted
    manager.free(a)
    assert sorted(manager.kv_snapshot().cached_blocks()) == [0, 1]
    assert list(manager.kv_snapshot().free_block_ids()) == [3, 4, 5, 6, 7, 2]


@pytest.mark.parametrize("num_pages", [3, 40])  # read one by one, and gathered
def test_the_radix_manager_refuses_to_free_a_page_a_request_holds(num_pages):
    manager = RadixKVManager(num_blocks=64, page_size=4, enable_caching=True)
    pages = list(range(10, 10 + num_pages))
    manager._check_unheld(pages, "held")  # none held: no complaint
    manager.ref_cnt[pages[-1]] = 1
    with pytest.raises(AssertionError, match="held"):
        manager._check_unheld(pages, "held")
