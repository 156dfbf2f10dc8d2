"""RadixCache: match, insert, split, lock, LRU eviction of unlocked leaves; exact pages."""

from __future__ import annotations

import numpy as np
import pytest

from schedcheck.engines.reference.radix_cache import RadixCache


def _t(*values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _hashes(n: int, tag: int = 0) -> list[bytes]:
    return [bytes([tag, i]) * 16 for i in range(n)]


def _insert(cache, root, tokens, pages, tag=0):
    return cache.insert(root, tokens, tokens.size, pages, _hashes(len(pages), tag))


def test_insert_then_match_whole_and_partial():
    cache = RadixCache(page_size=2)
    root = cache.root(b"")
    tree_pages, leaf = _insert(cache, root, _t(1, 2, 3, 4, 5, 6), [10, 11, 12])
    assert tree_pages == [10, 11, 12] and leaf.depth_tokens == 6
    assert cache.page_hash == dict(zip([10, 11, 12], _hashes(3), strict=True))
    pages, node = cache.match_prefix(root, _t(1, 2, 3, 4, 5, 6, 7), 7)  # floored to 6
    assert pages == [10, 11, 12] and node is leaf
    pages, node = cache.match_prefix(root, _t(1, 2, 3, 4, 9, 9), 6)  # splits after 4
    assert pages == [10, 11] and node.depth_tokens == 4 and cache.num_nodes == 2
    assert node.children[_t(5, 6).tobytes()] is leaf and leaf.block_ids == [12]
    pages, node = cache.match_prefix(root, _t(1, 3), 2)
    assert pages == [] and node is root


def test_page_granular_mismatch_inside_a_page():
    cache = RadixCache(page_size=4)
    root = cache.root(b"")
    _insert(cache, root, _t(0, 1, 2, 3, 4, 5, 6, 7), [3, 8])
    pages, node = cache.match_prefix(root, _t(0, 1, 2, 3, 4, 5, 9, 9), 8)
    assert pages == [3] and node.depth_tokens == 4  # tokens 4, 5 match but not the page


def test_insert_returns_tree_pages_for_existing_content():
    cache = RadixCache(page_size=1)
    root = cache.root(b"")
    _insert(cache, root, _t(5, 6, 7), [0, 1, 2])
    tree_pages, node = _insert(cache, root, _t(5, 6, 8, 9), [3, 4, 5, 6], tag=1)
    assert tree_pages == [0, 1, 5, 6]  # 5, 6 already held in pages 0, 1
    assert node.depth_tokens == 4 and sorted(cache.page_hash) == [0, 1, 2, 5, 6]


def test_namespaces_do_not_share_nodes():
    cache = RadixCache(page_size=1)
    _insert(cache, cache.root(b"a"), _t(1, 2), [0, 1])
    assert cache.match_prefix(cache.root(b"b"), _t(1, 2), 2)[0] == []
    assert cache.match_prefix(cache.root(b"a"), _t(1, 2), 2)[0] == [0, 1]


def test_lru_eviction_of_unlocked_leaves_and_parents():
    cache = RadixCache(page_size=1)
    root = cache.root(b"")
    _insert(cache, root, _t(1, 2, 3), [0, 1, 2])  # A, tick 1
    _, b = _insert(cache, root, _t(1, 2, 9), [3, 4, 5])  # tick 2: splits A after 2
    assert cache.num_nodes == 3 and cache.evictable_num_pages == 4  # pages 0, 1, 2, 5
    cache.lock(b)
    assert cache.evictable_num_pages == 1  # A's leaf (page 2) only
    cache.match_prefix(root, _t(1, 2, 3), 3)  # refreshes A: but B is locked anyway
    assert cache.evict(1) == [2]
    assert cache.evict(5) == []  # nothing else: B's path is locked
    cache.unlock(b)
    assert cache.evictable_num_pages == 3
    assert cache.evict(3) == [5, 1, 0]  # B's leaf, then the shared parent (tail first)
    assert cache.num_nodes == 0 and cache.page_hash == {} and cache.evictable_num_pages == 0


def test_evicts_least_recently_used_first():
    cache = RadixCache(page_size=1)
    root = cache.root(b"")
    _insert(cache, root, _t(1), [0])
    _insert(cache, root, _t(2), [1])
    _insert(cache, root, _t(3), [2])
    cache.match_prefix(root, _t(1), 1)  # 1 becomes the most recent
    assert cache.evict(1) == [1]
    assert cache.evict(1) == [2]
    assert cache.evict(1) == [0]


def test_lock_counts_requests_in_subtree():
    cache = RadixCache(page_size=1)
    root = cache.root(b"")
    _, leaf = _insert(cache, root, _t(1, 2), [0, 1])
    _, node = cache.match_prefix(root, _t(1, 5), 2)  # splits: node = [1]
    cache.lock(leaf)
    cache.lock(node)
    assert (node.lock_ref, leaf.lock_ref) == (2, 1)
    cache.unlock(leaf)
    cache.unlock(node)
    with pytest.raises(AssertionError, match="unlock without lock"):
        cache.unlock(node)


def test_heap_stays_bounded_under_many_touches():
    cache = RadixCache(page_size=1)
    root = cache.root(b"")
    _insert(cache, root, _t(1), [0])
    for _ in range(3_000):
        cache.match_prefix(root, _t(1), 1)
    assert len(cache._evict_heap) <= 4 * cache.num_nodes + 1024 + 1
    assert cache.evict(1) == [0]
