"""The block pool of the hashed manager (vLLM v1 `BlockPool` design).

State of every block id `b` in [0, num_blocks)::

    ref_cnt[b] > 0              held by ref_cnt[b] requests; never in the free queue
    ref_cnt[b] == 0             in free_block_queue (LRU order: head = evicted first);
                                in_free_queue[b] says so as an array (the pool check's
                                point lookup: a gather, not a dict probe per block)
    b in cached_hash_of_block   cached: cached_block_hash_to_block[cached_hash_of_block[b]] == b

A cached block with ref_cnt 0 stays in the free queue and can still be hit ("touched":
removed from the queue, ref_cnt 1); taking a block from the queue's head for a new
allocation evicts its hash first. Requests free their blocks in reverse order, so the tail of
a prompt sits nearer the head of the queue and is evicted before its prefix::

    free(request with blocks [7, 3, 9])  ->  free_block_queue: ... 9, 3, 7   (tail first)

The queue is a doubly linked list in arrays (free_queue.py: removal from the middle is
O(1), and a prefill's or a finished request's blocks move in one compiled pass);
decisions never depend on set or hash order. There is no null block: every block id is
usable.

`change_log` (off until a checker turns it on through the snapshot) collects the ids of the
blocks whose ref_cnt, hash or free-queue position changed, so that the block-pool invariants
check only those each step (invariants/pool_delta.py). With it, `hash_words` and
`cached_now` hold each cached block's hash as 4 words and say which blocks are cached: the
check reads a step's new hashes as arrays (written when it reads them, from
`hash_words_pending`).

When two requests compute the same block at the same time, the first to cache it owns the
hash; the second one's copy stays an uncached private block (vLLM keeps both under one hash
and always hits the first, which amounts to the same).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from schedcheck.engines.arrays import first_true
from schedcheck.engines.protocol import hash_words_of
from schedcheck.engines.reference.free_queue import FreeBlockQueue
from schedcheck.engines.reference.per_block import (
    add_at,
    any_at,
    id_array,
    ids_of,
    release_at,
    set_at,
)
from schedcheck.engines.reference.snapshot import readonly_view


class BlockPool:
    __slots__ = (
        "cache_version",
        "cached_block_hash_to_block",
        "cached_hash_of_block",
        "cached_now",
        "change_log",
        "evictions_of_block",
        "free_block_queue",
        "hash_changes_of_block",
        "hash_words",
        "hash_words_pending",
        "hash_words_views",
        "in_free_queue",
        "num_blocks",
        "num_evicted_blocks",
        "pool_views",
        "ref_cnt",
    )

    def __init__(self, num_blocks: int) -> None:
        assert num_blocks >= 1
        self.num_blocks = num_blocks
        self.ref_cnt: npt.NDArray[np.int64] = np.zeros(num_blocks, dtype=np.int64)
        self.cached_block_hash_to_block: dict[bytes, int] = {}
        # The inverse map, kept incrementally so that a snapshot costs nothing.
        self.cached_hash_of_block: dict[int, bytes] = {}
        self.free_block_queue = FreeBlockQueue(num_blocks)
        self.in_free_queue: npt.NDArray[np.bool_] = self.free_block_queue.in_queue  # the same
        # Bumped whenever the set of cached hashes changes: a lookup made at an unchanged
        # version would find the same hit.
        self.cache_version = 0
        self.num_evicted_blocks = 0  # cached blocks evicted for new allocations, in total
        # how many times each block's hash was evicted: a lookup's hit is still whole while
        # its blocks' counts are unchanged (hashed_manager.get_computed_blocks)
        self.evictions_of_block: npt.NDArray[np.int64] = np.zeros(num_blocks, dtype=np.int64)
        # block ids changed since the checker looked, in the order logged (one may repeat:
        # a list extends at a copy's cost, a set hashes every id)
        self.change_log: list[int] | None = None
        # how many times each block's hash changed (cached, evicted): the pool check reads
        # the hashes of the changed blocks whose count moved since it looked, no others
        self.hash_changes_of_block: npt.NDArray[np.int64] = np.zeros(num_blocks, dtype=np.int64)
        # (ref_cnt, in the free queue, hash changes) read-only, made once: the pool check's
        # compiled walk reads them (the arrays are never replaced)
        self.pool_views = (
            readonly_view(self.ref_cnt),
            readonly_view(self.in_free_queue),
            readonly_view(self.hash_changes_of_block),
        )
        # while the change log is on: each block's hash as 4 little-endian words and whether
        # it is cached now, so that the pool check reads a step's new hashes as arrays (None
        # off, and for good once a hash is not 32 bytes long)
        self.hash_words: npt.NDArray[np.uint64] | None = None
        self.cached_now: npt.NDArray[np.bool_] | None = None
        # the blocks cached since the words were last brought up to date, with their
        # hashes, in order: written at once when read (a decode step caches a block per
        # request here and there; one write a step, not one each)
        self.hash_words_pending: list[tuple[Sequence[int], Sequence[bytes]]] = []
        # (cached_now, hash_words) read-only, made once: what the snapshot hands
        self.hash_words_views: tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint64]] | None = None

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    def get_cached_block(self, block_hash: bytes) -> int | None:
        return self.cached_block_hash_to_block.get(block_hash)

    def evictions_of(self, block_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Each block's eviction count now (a copy: `num_not_evicted` compares it later)."""
        return self.evictions_of_block[block_ids]

    def num_not_evicted(
        self, block_ids: npt.NDArray[np.int64], evictions: npt.NDArray[np.int64]
    ) -> int:
        """How many of `block_ids`, from the first, were not evicted since their eviction
        counts were `evictions` (`evictions_of` then; all of them: len(block_ids))."""
        assert block_ids.shape == evictions.shape
        return first_true(self.evictions_of_block[block_ids] != evictions, len(block_ids))

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        """Pop `num_blocks` blocks from the head of the free queue, evicting their hashes."""
        cached = self.cached_hash_of_block
        if num_blocks == 1:  # the decode path: no numpy array made
            block_id = self.free_block_queue.popleft()  # asserts the free count
            if block_id in cached:
                self._evict(block_id)
            assert self.ref_cnt[block_id] == 0, "a free block had holders"
            self.ref_cnt[block_id] = 1
            if self.change_log is not None:
                self.change_log.append(block_id)
            return [block_id]
        ids = self.free_block_queue.popleft_many(num_blocks)  # asserts the free count
        block_ids: list[int] = ids.tolist()
        if not cached.keys().isdisjoint(block_ids):
            self._evict_many(list(filter(cached.__contains__, block_ids)))
        held = ids_of(ids)  # the form per_block reads fastest
        assert not any_at(self.ref_cnt, held), "a free block had holders"
        set_at(self.ref_cnt, held, 1)
        if self.change_log is not None:
            self.change_log.extend(block_ids)
        return block_ids

    def touch(self, block_ids: Sequence[int]) -> None:
        """Take one more reference on each block of a cache hit (removed from the queue)."""
        if not block_ids:
            return
        ids = id_array(block_ids)  # one conversion, two uses
        self.free_block_queue.remove_many(ids)
        add_at(self.ref_cnt, ids_of(ids), 1)
        if self.change_log is not None:
            self.change_log.extend(block_ids)

    def free_blocks(self, ordered_block_ids: Sequence[int]) -> None:
        """Drop one reference on each block; blocks reaching 0 join the queue's tail in order.

        The caller passes a request's blocks in reverse order (tail first).
        """
        if not ordered_block_ids:
            return
        freed = release_at(self.ref_cnt, ordered_block_ids)
        if self.change_log is not None:
            self.change_log.extend(ordered_block_ids)
        self.free_block_queue.append_many(id_array(freed))  # asserts none was queued

    def cache_full_blocks(
        self,
        block_ids: Sequence[int],
        block_hashes: Sequence[bytes],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        """Cache blocks [num_cached_blocks, num_full_blocks) of one request's table."""
        assert 0 <= num_cached_blocks <= num_full_blocks <= len(block_ids)
        assert num_full_blocks <= len(block_hashes)
        cached = self.cached_block_hash_to_block
        cached_hash_of_block = self.cached_hash_of_block
        new_ids = block_ids[num_cached_blocks:num_full_blocks]
        new_hashes = block_hashes[num_cached_blocks:num_full_blocks]
        if self.change_log is not None:
            self.change_log.extend(new_ids)
        if (
            cached_hash_of_block.keys().isdisjoint(new_ids)
            and cached.keys().isdisjoint(new_hashes)
            and len(set(new_hashes)) == len(new_hashes)
        ):  # the common case, in bulk: fresh blocks, content no one cached yet
            cached.update(zip(new_hashes, new_ids, strict=True))
            cached_hash_of_block.update(zip(new_ids, new_hashes, strict=True))
            ids = ids_of(new_ids)
            add_at(self.hash_changes_of_block, ids, 1)
            if self.cached_now is not None:
                set_at(self.cached_now, ids, True)
                self.hash_words_pending.append((new_ids, new_hashes))
            assert len(cached) == len(cached_hash_of_block), "one block per hash"
            self.cache_version += 1
            return
        for index in range(num_cached_blocks, num_full_blocks):
            block_id = block_ids[index]
            if block_id in cached_hash_of_block:
                continue  # a hit taken from the cache: already cached under this hash
            block_hash = block_hashes[index]
            if block_hash in cached:
                continue  # another request cached the same content first
            cached[block_hash] = block_id
            cached_hash_of_block[block_id] = block_hash
            self.hash_changes_of_block[block_id] += 1
            if self.cached_now is not None:
                self.cached_now[block_id] = True
                self.hash_words_pending.append(((block_id,), (block_hash,)))
            self.cache_version += 1

    def start_change_log(self) -> None:
        """Turn the change log on, and the hash words with it (from the cache as it is)."""
        self.change_log = []
        self.hash_words = np.zeros((self.num_blocks, 4), np.uint64)
        self.cached_now = np.zeros(self.num_blocks, bool)
        cached = self.cached_hash_of_block
        self.cached_now[np.fromiter(cached, np.int64, len(cached))] = True
        self.hash_words_pending = [(list(cached), list(cached.values()))]
        self.hash_words_views = (readonly_view(self.cached_now), readonly_view(self.hash_words))

    def flush_hash_words(self) -> None:
        """Write the pending hashes into `hash_words`, in the order they were cached (all
        off, for good, if one is not 32 bytes long)."""
        pending, self.hash_words_pending = self.hash_words_pending, []
        if self.hash_words is None or not pending:
            return
        if len(pending) == 1:  # most steps: one request cached a block
            ids, hashes = list(pending[0][0]), list(pending[0][1])
        else:
            ids = list(itertools.chain.from_iterable(i for i, _ in pending))
            hashes = list(itertools.chain.from_iterable(h for _, h in pending))
        words = hash_words_of(hashes)
        if words is None:
            self.hash_words = self.cached_now = self.hash_words_views = None
            return
        # row by row: a decode step's few (beats numpy's batch calls), or a block cached
        # twice (the later hash is its own)
        if len(ids) <= 4 or len(set(ids)) != len(ids):
            for k, block_id in enumerate(ids):  # bounded: the blocks cached
                self.hash_words[block_id] = words[k]
            return
        self.hash_words[np.array(ids, np.int64)] = words

    def evict_cached_free(self, num_blocks_max: int) -> int:
        """Fault point: drop the hashes of up to `num_blocks_max` cached free blocks, head
        of the free queue first (the next ones an allocation would evict); returns the count."""
        evicted = 0
        for block_id in list(self.free_block_queue):  # bounded: num_blocks
            if evicted == num_blocks_max:
                break
            if block_id in self.cached_hash_of_block:
                self._evict(block_id)
                evicted += 1
        return evicted

    def _evict_many(self, block_ids: list[int]) -> None:
        """_evict of each (distinct, cached) block, as passes in C: a prefill chunk's new
        blocks evict hundreds of hashes at once."""
        hashes = list(map(self.cached_hash_of_block.pop, block_ids))
        if self.change_log is not None:
            self.change_log.extend(block_ids)
        owners = list(map(self.cached_block_hash_to_block.pop, hashes))
        assert owners == block_ids, "each hash was cached for its block"
        ids = np.fromiter(block_ids, np.int64, len(block_ids))  # distinct: a fancy += is exact
        self.evictions_of_block[ids] += 1
        self.hash_changes_of_block[ids] += 1
        if self.cached_now is not None:
            self.cached_now[ids] = False
        self.cache_version += len(block_ids)
        self.num_evicted_blocks += len(block_ids)

    def _evict(self, block_id: int) -> None:
        block_hash = self.cached_hash_of_block.pop(block_id)
        if self.change_log is not None:
            self.change_log.append(block_id)
        assert self.cached_block_hash_to_block.get(block_hash) == block_id
        del self.cached_block_hash_to_block[block_hash]
        self.evictions_of_block[block_id] += 1
        self.hash_changes_of_block[block_id] += 1
        if self.cached_now is not None:
            self.cached_now[block_id] = False
        self.cache_version += 1
        self.num_evicted_blocks += 1
