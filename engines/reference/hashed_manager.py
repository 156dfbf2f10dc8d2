"""The hashed block manager: vLLM v1's KVCacheManager over a `BlockPool`.

A waiting request's prefix hit is the longest run of its block hashes found in the cache,
capped so that at least one token is computed (vllm#7753)::

    prompt (num_tokens 48, block_size 16), all three blocks cached:
    | block 0 (hit) | block 1 (hit) | block 2 (recomputed) |
    0              16              32                     48
    max cache hit = (48 - 1) // 16 = 2 blocks -> num_computed_tokens 32, 16 tokens to run

After each step `cache_blocks` caches the blocks that became full and written; a block is
never cached earlier (vLLM v1 caches at allocation because its forward writes every KV
before any attention reads it; the reference engine is stricter so that the same-step case of
vllm#7822 cannot arise at all). A request's blocks are freed in reverse order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from schedcheck.engines.reference.block_pool import BlockPool
from schedcheck.engines.reference.kv_manager import EMPTY_HIT, PrefixHit, cdiv
from schedcheck.engines.reference.request import Request
from schedcheck.engines.reference.snapshot import KeysSequence, ManagerSnapshot, readonly_view


class HashedKVManager:
    """vLLM v1-style KV cache manager (one KV cache group, full attention)."""

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool) -> None:
        assert num_blocks >= 1 and block_size >= 1
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(num_blocks)
        self.req_to_blocks: dict[str, list[int]] = {}
        # Count of leading blocks of each request already cached (vLLM: num_cached_block).
        self.num_cached_block: dict[str, int] = {}
        # The manager's own count of computed tokens per request (vllm#11186).
        self._num_computed_tokens: dict[str, int] = {}
        self._table_tuples: dict[str, tuple[int, ...]] = {}
        self._ref_cnt_view = readonly_view(self.block_pool.ref_cnt)
        # request id -> its last lookup while waiting: a head-of-line request retried every
        # step costs one dict lookup while the cache is unchanged, and a look past its old
        # hit while none of that hit's blocks was evicted (see get_computed_blocks)
        self._hit_memo: dict[str, _HitMemo] = {}

    # -- lookups ---------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> PrefixHit:
        """The longest cached prefix of the request's block hashes, capped (see above).

        Memoized per waiting request (vllm#18957 looks up every step; so does this, in
        effect): at an unchanged cache version the same hit; else the old hit up to its
        first block evicted since still holds (a hash leaves the cache only with its
        block's eviction, and is never re-pointed), and only the hashes past that are
        looked up::

            block_hashes:  | h0 .. h(k-1): not evicted, still cached | hk ...  looked up |
                           0                                         k        max_num_blocks
                           (k: the old hit's length if none of its blocks was evicted)
        """
        if not self.enable_caching:
            return EMPTY_HIT
        pool = self.block_pool
        memo = self._hit_memo.get(request.request_id)
        key = (pool.cache_version, request.num_tokens)
        if memo is not None and memo.key == key:
            return memo.hit  # the cache has not changed since: the same hit
        max_num_blocks = self._max_cache_hit_tokens(request) // self.block_size
        hit, ids = EMPTY_HIT, _NO_IDS
        if memo is not None:
            num_kept = min(pool.num_not_evicted(memo.ids, memo.evictions), max_num_blocks)
            hit, ids = memo.hit, memo.ids
            if num_kept < len(ids):  # a block evicted since, or a lower cap than before
                hit = PrefixHit(hit.block_ids[:num_kept], num_kept * self.block_size)
                ids = ids[:num_kept]
        more = self._longest_hit(request.block_hashes, max_num_blocks, len(hit.block_ids))
        if more:
            block_ids = hit.block_ids + tuple(more)
            hit = PrefixHit(block_ids, len(block_ids) * self.block_size)
            ids = np.array(block_ids, np.int64)
        memo = _HitMemo(key, hit, ids, pool.evictions_of(ids))
        self._hit_memo[request.request_id] = memo
        return hit

    def _hit_ids(self, request_id: str, hit: PrefixHit) -> npt.NDArray[np.int64]:
        """The hit's block ids as an array (the memo's, when it is the memo's hit)."""
        memo = self._hit_memo.get(request_id)
        if memo is not None and memo.hit is hit:
            return memo.ids
        return np.array(hit.block_ids, np.int64)

    def _max_cache_hit_tokens(self, request: Request) -> int:
        """A hit leaves one prompt token to compute, so that the request samples (vllm#7753)."""
        return request.num_tokens - 1

    def _longest_hit(
        self, block_hashes: Sequence[bytes], max_num_blocks: int, start: int = 0
    ) -> list[int]:
        """Block ids of the cached hashes from `start` on, up to the first not cached. The
        lookups run in C (map) over chunks of doubling size, so a hit stopping early does
        not look up a long prompt's rest."""
        lookup = self.block_pool.cached_block_hash_to_block.get
        found: list[int] = []
        size = 8
        while start < max_num_blocks:  # bounded: start grows by size >= 8
            chunk = list(map(lookup, block_hashes[start : min(start + size, max_num_blocks)]))
            if None in chunk:
                found.extend(cast(list[int], chunk[: chunk.index(None)]))
                return found
            found.extend(cast(list[int], chunk))  # no None in it
            start, size = start + size, 2 * size
        return found

    # -- allocation ------------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: PrefixHit = EMPTY_HIT,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        """Blocks for tokens [0, num_computed + hit + num_new_tokens + num_lookahead_tokens);
        False if they don't fit.

        ::

            | held blocks (comp) | hit blocks (touched) | new blocks (from the queue head)  |
            0           num_computed_tokens     +hit.num_tokens    +num_new   +num_lookahead

        A running request holds blocks and has no hit: it only grows. A request being
        (re)admitted holds none: see `_admit`.
        """
        request_id = request.request_id
        blocks = self.req_to_blocks.get(request_id)
        if blocks is None:
            return self._admit(request, num_new_tokens, hit, num_lookahead_tokens)
        assert not hit.block_ids, "a hit only at (re)admission"
        num_computed_tokens = request.num_computed_tokens
        num_tokens_need_slot = num_computed_tokens + num_new_tokens + num_lookahead_tokens
        num_new_blocks = -(-num_tokens_need_slot // self.block_size) - len(blocks)
        if num_new_blocks > 0:
            if num_new_blocks > len(self.block_pool.free_block_queue):
                return False
            blocks.extend(self.block_pool.get_new_blocks(num_new_blocks))
            self._table_tuples.pop(request_id, None)
        self._num_computed_tokens[request_id] = num_computed_tokens
        return True

    def _admit(
        self, request: Request, num_new_tokens: int, hit: PrefixHit, num_lookahead_tokens: int
    ) -> bool:
        """(Re)admission: the hit's blocks, then new blocks for the rest.

        Hit blocks with ref_cnt 0 sit in the free queue, so they count against the free
        blocks too: they are touched first, and only then are new blocks taken, so a
        just-matched block is never evicted for the same request's new blocks.
        """
        request_id = request.request_id
        num_computed_tokens = request.num_computed_tokens + hit.num_tokens
        num_tokens_need_slot = num_computed_tokens + num_new_tokens + num_lookahead_tokens
        num_required_blocks = cdiv(num_tokens_need_slot, self.block_size)
        num_new_blocks = max(0, num_required_blocks - len(hit.block_ids))
        pool = self.block_pool
        queue = pool.free_block_queue
        if num_new_blocks > len(queue):  # refused whatever the hit: the head of a full
            return False  # queue retries every step, and its hit may be hundreds of blocks
        # hit blocks no request holds: in the free queue, so taken from it (vLLM counts
        # them by ref_cnt == 0 too)
        hit_ids = self._hit_ids(request_id, hit)
        num_evictable_hit_blocks = int(np.count_nonzero(pool.ref_cnt[hit_ids] == 0))
        if num_new_blocks + num_evictable_hit_blocks > len(queue):
            return False
        self._hit_memo.pop(request_id, None)  # admitted: its lookup is spent
        pool.touch(hit.block_ids)
        self.req_to_blocks[request_id] = [*hit.block_ids, *pool.get_new_blocks(num_new_blocks)]
        self.num_cached_block[request_id] = len(hit.block_ids)
        self._table_tuples.pop(request_id, None)
        self._num_computed_tokens[request_id] = num_computed_tokens
        return True

    # -- after a step ----------------------------------------------------------------------

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        """Cache the blocks of [0, num_computed_tokens) that are full (and so written)."""
        request_id = request.request_id
        self._num_computed_tokens[request_id] = num_computed_tokens
        num_full_blocks = num_computed_tokens // self.block_size
        if self.enable_caching and num_full_blocks > self.num_cached_block[request_id]:
            blocks = self.req_to_blocks[request_id]
            assert num_full_blocks <= len(blocks)
            self._cache(request, blocks, num_full_blocks)
        return num_computed_tokens

    def _cache(self, request: Request, blocks: list[int], num_full_blocks: int) -> None:
        """Cache blocks [num_cached_block, num_full_blocks) of the request's table."""
        request_id = request.request_id
        num_cached_blocks = self.num_cached_block[request_id]
        if num_full_blocks <= num_cached_blocks:
            return
        self.block_pool.cache_full_blocks(
            blocks, request.block_hashes, num_cached_blocks, num_full_blocks
        )
        self.num_cached_block[request_id] = num_full_blocks

    def free(self, request: Request, *, aborted: bool = False) -> None:
        """Free in reverse order: the tail blocks join the free queue first (evicted first)."""
        request_id = request.request_id
        self._hit_memo.pop(request_id, None)
        blocks = self.req_to_blocks.pop(request_id, None)
        if blocks is None:
            return
        self.block_pool.free_blocks(blocks[::-1])
        del self.num_cached_block[request_id]
        del self._num_computed_tokens[request_id]
        self._table_tuples.pop(request_id, None)

    # -- views -----------------------------------------------------------------------------

    def block_table(self, request_id: str) -> tuple[int, ...]:
        table = self._table_tuples.get(request_id)
        if table is None:
            table = self._table_tuples[request_id] = tuple(self.req_to_blocks[request_id])
        return table

    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    def num_evicted_blocks(self) -> int:
        return self.block_pool.num_evicted_blocks

    def evict_cached_free(self, num_blocks_max: int) -> int:
        return self.block_pool.evict_cached_free(num_blocks_max)

    def num_computed_tokens_of(self, request_id: str) -> int:
        return self._num_computed_tokens.get(request_id, -1)

    def holders(self) -> Sequence[str]:
        return list(self.req_to_blocks)

    def kv_snapshot(self) -> HashedKVSnapshot:
        return HashedKVSnapshot(self)


class HashedKVSnapshot(ManagerSnapshot):
    """`KVSnapshot` answered from the manager's live structures (valid until the next step)."""

    __slots__ = ()
    _manager: HashedKVManager

    def free_block_ids(self) -> Sequence[int]:
        """The free queue, head (evicted first) to tail; cached blocks with ref_cnt 0 included."""
        return KeysSequence(self._manager.block_pool.free_block_queue)

    def cached_blocks(self) -> Mapping[int, bytes]:
        return self._manager.block_pool.cached_hash_of_block

    def block_tables(self) -> Mapping[str, Sequence[int]]:
        return self._manager.req_to_blocks

    def num_computed_tokens(self) -> Mapping[str, int]:
        return self._manager._num_computed_tokens

    def is_free(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """For each block id: in the free queue? (a gather, for the pool check)"""
        return self._manager.block_pool.in_free_queue[ids]

    def pool_arrays(
        self,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """(ref_cnt, in the free queue, hash changes) of every block id, the pool's own
        arrays read-only: the pool check walks a step's changed blocks in one compiled
        call (invariants/pool_delta_kernels.py)."""
        return self._manager.block_pool.pool_views  # the pool's own: a test may swap it

    def hash_changes_of(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """For each block id: how many times its hash changed so far (the pool check reads
        the hashes of those whose count moved)."""
        return self._manager.block_pool.hash_changes_of_block[ids]

    def take_changed_block_ids(self) -> Collection[int] | None:
        """Blocks whose ref_cnt, hash or free-queue position changed since the last call;
        None on the first (it turns the pool's change log on). See invariants/pool_delta.py."""
        pool = self._manager.block_pool
        changed = pool.change_log
        if changed is None:
            pool.start_change_log()
        else:
            pool.change_log = []
        return changed

    def hash_words(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint64]] | None:
        """(cached now, the hash as 4 little-endian words) of every block id, read-only,
        while the change log is on and every hash is 32 bytes (else None): the pool
        check reads a step's new hashes as arrays, no bytes object built."""
        pool = self._manager.block_pool
        pool.flush_hash_words()
        return pool.hash_words_views


@dataclass(frozen=True, slots=True)
class _HitMemo:
    """A waiting request's last prefix lookup: at `key` (cache version, num_tokens) it
    found `hit`, whose blocks are `ids`; `evictions`: each one's eviction count then (a
    count that moved since: that block was evicted)."""

    key: tuple[int, int]
    hit: PrefixHit
    ids: npt.NDArray[np.int64]
    evictions: npt.NDArray[np.int64]


_NO_IDS: npt.NDArray[np.int64] = np.zeros(0, np.int64)
