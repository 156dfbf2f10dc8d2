"""BlockPool: LRU free queue, ref counts, caching and eviction, exact orders."""

from __future__ import annotations

import numpy as np
import pytest

from schedcheck.engines.reference.block_pool import BlockPool


def _h(i: int) -> bytes:
    return bytes([i]) * 32


def test_new_blocks_come_from_the_head():
    pool = BlockPool(6)
    assert list(pool.free_block_queue) == [0, 1, 2, 3, 4, 5]
    assert pool.get_new_blocks(2) == [0, 1]
    assert pool.get_new_blocks(1) == [2]
    assert pool.ref_cnt.tolist() == [1, 1, 1, 0, 0, 0]
    assert list(pool.free_block_queue) == [3, 4, 5]


def test_free_in_given_order_joins_the_tail():
    pool = BlockPool(6)
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(blocks[::-1])  # a request frees tail first
    assert list(pool.free_block_queue) == [3, 4, 5, 2, 1, 0]
    assert pool.ref_cnt.tolist() == [0] * 6


def test_shared_block_joins_the_queue_with_its_last_holder():
    pool = BlockPool(4)
    a = pool.get_new_blocks(2)
    pool.touch([a[0]])  # a second request shares block 0
    pool.free_blocks(a[::-1])
    assert list(pool.free_block_queue) == [2, 3, 1]
    pool.free_blocks([a[0]])
    assert list(pool.free_block_queue) == [2, 3, 1, 0]


def test_cached_block_is_hit_from_the_queue_and_evicted_at_reuse():
    pool = BlockPool(3)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(blocks, [_h(1), _h(2)], 0, 2)
    assert pool.cached_hash_of_block == {0: _h(1), 1: _h(2)}
    pool.free_blocks(blocks[::-1])
    assert list(pool.free_block_queue) == [2, 1, 0]
    assert pool.get_cached_block(_h(1)) == 0  # still cached while free
    pool.touch([0])  # a hit
    assert list(pool.free_block_queue) == [2, 1] and pool.ref_cnt[0] == 1
    assert pool.get_new_blocks(2) == [2, 1]  # block 1 is evicted on reuse
    assert pool.get_cached_block(_h(2)) is None
    assert pool.cached_hash_of_block == {0: _h(1)}


def test_every_hash_change_counts_and_nothing_else_does():
    """hash_changes_of_block moves on caching and eviction (bulk and one by one), never on
    a hit, a free or a second cache of a cached block (the pool check relies on it)."""
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks, [_h(1), _h(2)], 0, 2)  # bulk: fresh blocks, new hashes
    assert pool.hash_changes_of_block.tolist() == [1, 1, 0, 0]
    pool.cache_full_blocks(blocks, [_h(1), _h(2), _h(2)], 0, 3)  # 2's hash is 1's: no-op
    pool.touch([0])
    pool.free_blocks(blocks[::-1])
    pool.free_blocks([0])
    assert pool.hash_changes_of_block.tolist() == [1, 1, 0, 0]
    assert list(pool.free_block_queue) == [3, 2, 1, 0]
    pool.get_new_blocks(1)  # block 3: never cached
    pool.get_new_blocks(1)  # block 2: never cached
    assert pool.get_new_blocks(1) == [1]  # evicts one
    pool.cache_full_blocks([1], [_h(5)], 0, 1)  # one by one: h5 is new, 1 not cached now
    assert pool.get_new_blocks(1) == [0]  # evicts
    assert pool.hash_changes_of_block.tolist() == [2, 3, 0, 0]


def test_same_content_cached_once():
    pool = BlockPool(4)
    a, b = pool.get_new_blocks(1), pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [_h(7)], 0, 1)
    pool.cache_full_blocks(b, [_h(7)], 0, 1)
    assert pool.cached_block_hash_to_block == {_h(7): 0}
    assert pool.cached_hash_of_block == {0: _h(7)}


def test_a_chunk_with_one_hash_cached_elsewhere_caches_the_others_in_order():
    """h2 is block 0's already: the chunk's other blocks are cached, in order, and the
    maps stay each other's inverse."""
    pool = BlockPool(5)
    a = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [_h(2)], 0, 1)
    chunk = pool.get_new_blocks(3)
    pool.cache_full_blocks(chunk, [_h(1), _h(2), _h(3)], 0, 3)
    assert list(pool.cached_block_hash_to_block.items()) == [(_h(2), 0), (_h(1), 1), (_h(3), 3)]
    assert pool.cached_hash_of_block == {0: _h(2), 1: _h(1), 3: _h(3)}


def test_double_free_is_caught():
    pool = BlockPool(2)
    blocks = pool.get_new_blocks(1)
    pool.free_blocks(blocks)
    with pytest.raises(AssertionError, match="double free"):
        pool.free_blocks(blocks)


def test_cannot_take_more_than_free():
    pool = BlockPool(2)
    with pytest.raises(AssertionError, match="caller checks the free count"):
        pool.get_new_blocks(3)


def test_equal_hashes_within_one_request_cache_the_first_block():
    """Only possible with a weakened hash (mutant hash-no-parent); the first copy wins."""
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks, [_h(1), _h(2), _h(1)], 0, 3)
    assert pool.cached_block_hash_to_block == {_h(1): 0, _h(2): 1}
    assert pool.cached_hash_of_block == {0: _h(1), 1: _h(2)}


def test_in_free_queue_is_the_queue_as_an_array():
    """in_free_queue[b] == (b in free_block_queue) after every operation that moves a block
    in or out of the queue: one block and many taken, a hit touched, frees that reach 0 and
    one that does not (the pool check reads the array, not the queue)."""
    pool = BlockPool(6)

    def mask() -> list[int]:
        return pool.in_free_queue.nonzero()[0].tolist()

    assert mask() == [0, 1, 2, 3, 4, 5]
    a = pool.get_new_blocks(3)  # many
    b = pool.get_new_blocks(1)  # one: the decode path
    assert mask() == [4, 5] == sorted(pool.free_block_queue)
    pool.touch([a[0]])  # a second holder: out of the queue already, stays out
    pool.free_blocks(a[::-1])  # blocks 2, 1 reach 0; block 0 keeps a holder
    assert mask() == [1, 2, 4, 5] == sorted(pool.free_block_queue)
    pool.touch([1])  # a hit taken back from the queue
    pool.free_blocks([a[0], *b])
    assert mask() == [0, 2, 3, 4, 5] == sorted(pool.free_block_queue)


def test_the_change_log_lists_every_change_in_order_once_turned_on():
    """Off, nothing is logged; on, every block whose ref_cnt, hash or queue position
    changed is listed as it changes (a block changed twice is listed twice)."""
    pool = BlockPool(4)
    pool.get_new_blocks(1)
    assert pool.change_log is None
    pool.change_log = []
    blocks = pool.get_new_blocks(2)  # [1, 2]
    pool.cache_full_blocks(blocks, [_h(1), _h(2)], 0, 2)
    pool.touch([1])
    pool.free_blocks([2, 1])
    assert pool.get_new_blocks(1) == [3]
    assert pool.get_new_blocks(1) == [2]  # evicts block 2's hash
    assert pool.change_log == [1, 2, 1, 2, 1, 2, 1, 3, 2, 2]


def test_hash_words_follow_the_cache_while_the_log_is_on():
    """Turned on, the words hold every cached block's 32-byte hash once written (those
    cached before included; pending until then, in order) and `cached_now` says which
    blocks are cached; an eviction clears it; a hash of another length turns the words
    off for good."""
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(blocks, [_h(1), _h(2)], 0, 2)
    assert pool.hash_words is None and pool.cached_now is None
    pool.start_change_log()
    pool.flush_hash_words()
    assert pool.change_log == [] and pool.cached_now.tolist() == [True, True, False, False]
    assert pool.hash_words[1].tobytes() == _h(2)
    more = pool.get_new_blocks(2)  # [2, 3]
    pool.cache_full_blocks(more, [_h(3), _h(4)], 0, 2)
    assert pool.cached_now.tolist() == [True] * 4 and not pool.hash_words[2:].any()  # pending
    pool.flush_hash_words()
    assert [pool.hash_words[b].tobytes() for b in range(4)] == [_h(1), _h(2), _h(3), _h(4)]
    pool.free_blocks(blocks[::-1])
    assert pool.get_new_blocks(1) == [1]  # block 1's hash evicted
    assert pool.cached_now.tolist() == [True, False, True, True]
    pool.cache_full_blocks([1], [_h(5)], 0, 1)
    pool.free_blocks([1])
    assert pool.get_new_blocks(1) == [0]  # evicts block 0
    pool.free_blocks([0])
    assert pool.get_new_blocks(2) == [1, 0]  # evicts block 1 (_h(5)) again
    pool.cache_full_blocks([1], [_h(6)], 0, 1)  # block 1 cached twice since the last write
    pool.flush_hash_words()
    assert pool.hash_words[1].tobytes() == _h(6)  # the later hash
    assert pool.cached_now.tolist() == [False, True, True, True]
    pool.cache_full_blocks([0], [b"short"], 0, 1)
    pool.flush_hash_words()
    assert pool.hash_words is None and pool.cached_now is None


@pytest.mark.parametrize("num_rows", [3, 4, 5, 9])
def test_hash_words_flush_row_by_row_and_in_batch_alike(num_rows):
    """A few pending hashes are written row by row, more in one batch: either way every
    row lands, a block cached twice keeps the later hash, and a short hash among them turns
    the words off."""
    pool = BlockPool(16)
    pool.start_change_log()
    ids = [*range(1, num_rows), 1]  # block 1 twice: the later hash is its own
    hashes = [_h(10 + k) for k in range(num_rows)]
    pool.hash_words_pending = [(ids[:2], hashes[:2]), (ids[2:], hashes[2:])]
    pool.flush_hash_words()
    expected = {b: h for b, h in zip(ids, hashes, strict=True)}
    assert {b: pool.hash_words[b].tobytes() for b in expected} == expected
    assert expected[1] == _h(10 + num_rows - 1)
    assert not pool.hash_words[num_rows:].any() and not pool.hash_words[0].any()
    pool.hash_words_pending = [(ids, [*hashes[:-1], b"short"])]
    pool.flush_hash_words()
    assert pool.hash_words is None and pool.cached_now is None


def test_num_not_evicted_counts_the_blocks_before_the_first_evicted_since():
    pool = BlockPool(6)
    blocks = pool.get_new_blocks(3)  # [0, 1, 2]
    pool.cache_full_blocks(blocks, [_h(1), _h(2), _h(3)], 0, 3)
    ids = np.array(blocks, np.int64)
    before = pool.evictions_of(ids)
    assert pool.num_not_evicted(ids, before) == 3  # none evicted
    pool.free_blocks(blocks[::-1])  # queue: 3, 4, 5, 2, 1, 0
    pool.get_new_blocks(4)  # takes 3, 4, 5 and 2, evicting block 2's hash
    assert pool.num_not_evicted(ids, before) == 2
    assert pool.num_not_evicted(ids[:0], before[:0]) == 0
    pool.get_new_blocks(2)  # takes 1 and 0
    assert pool.num_not_evicted(ids, before) == 0
