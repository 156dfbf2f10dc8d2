"""The radix block manager: SGLang's RadixCache + a page pool, behind the same interface.

A block is a page (the run's block_size is the page size). Each request's block table is
its page list, in two parts::

    block_table   | tree pages (owned by the tree) | private pages (owned by the request) |
                  0                        num_tree_pages                        len(table)
    tokens        0                 num_tree_pages * page_size        num_computed ... end

- tree pages lie on the path root .. last_node, which the request locks (lock_ref), so they
  are never evicted while it runs; they came from the prefix hit or from its own inserts;
- after every prefill step (a chunk that is not a single-token decode), the request's newly
  full and written pages are inserted into the tree (SGLang's cache_unfinished_req; decode
  pages go in when the request ends, as in SGLang): pages the tree did not hold become tree
  pages; where the tree already held that content (another request inserted it meanwhile)
  the request's duplicate page is freed and its block table switches to the tree's page,
  whose KV holds the same tokens (sglang#1858: every chunk page is owned by the tree or freed
  exactly once);
- at finish, abort or preemption the written full pages are inserted the same way
  (cache_finished_req), the private rest goes back to the free pool, tail first, and the lock
  is released; tree pages never go back to the pool except by eviction (sglang#38355).

Snapshot semantics: `ref_cnt[p]` = number of request block tables holding page p; a tree
page with ref_cnt > 0 is on a locked path (lock_ref > 0), one with ref_cnt 0 is evictable;
`cached_blocks` = every tree page with the chained content hash of its prefix;
`free_block_ids` = the free pool in allocation order (head = handed out first); tree pages are
never in it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from schedcheck.engines.reference.kv_manager import EMPTY_HIT, PrefixHit, cdiv
from schedcheck.engines.reference.per_block import BlockIds, add_at, any_at, ids_of, release_at
from schedcheck.engines.reference.radix_cache import RadixCache, TreeNode
from schedcheck.engines.reference.request import Request
from schedcheck.engines.reference.snapshot import CountedDeque, ManagerSnapshot, readonly_view


class _RequestPages:
    __slots__ = ("block_ids", "last_node", "num_computed_tokens", "num_tree_pages")

    def __init__(self, last_node: TreeNode | None) -> None:
        self.block_ids: list[int] = []
        self.num_tree_pages = 0
        self.last_node = last_node  # the deepest tree node held (locked); a root if none
        self.num_computed_tokens = 0  # the manager's own count


class RadixKVManager:
    def __init__(self, num_blocks: int, page_size: int, enable_caching: bool) -> None:
        assert num_blocks >= 1 and page_size >= 1
        self.block_size = page_size
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.tree = RadixCache(page_size)
        self.free_pool = CountedDeque(num_blocks)  # O(1) membership for the pool check
        # On once a checker takes them (RadixKVSnapshot): blocks whose ref_cnt, hash or
        # free-pool entries changed (the pool notes its own), tables rewritten in place.
        self.change_log: list[int] | None = None
        self.rewritten_req_ids: set[str] | None = None
        self.ref_cnt: npt.NDArray[np.int64] = np.zeros(num_blocks, dtype=np.int64)
        self._ref_cnt_view = readonly_view(self.ref_cnt)
        self._requests: dict[str, _RequestPages] = {}
        # each request's block_ids list itself, in _requests' order: the snapshot's
        # block_tables, kept rather than built a call (a list is extended, never replaced)
        self._tables: dict[str, list[int]] = {}
        self._table_tuples: dict[str, tuple[int, ...]] = {}

    # -- lookups ---------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> PrefixHit:
        """match_prefix over tokens[: num_tokens - 1] (page-floored): one token stays to run."""
        if not self.enable_caching:
            return EMPTY_HIT
        root = self.tree.root(request.salt_key)
        block_ids, node = self.tree.match_prefix(
            root, request.all_token_ids, request.num_tokens - 1
        )
        if not block_ids:
            return EMPTY_HIT
        return PrefixHit(tuple(block_ids), len(block_ids) * self.block_size, node)

    # -- allocation ------------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: PrefixHit = EMPTY_HIT,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        """Pages for tokens [0, num_computed + hit + num_new_tokens + num_lookahead_tokens);
        evicts LRU leaves if needed.

        The hit's path is locked first, so eviction never takes a just-matched page.
        """
        request_id = request.request_id
        pages = self._requests.get(request_id)
        if pages is not None:
            # A running request (no hit): the decode / next-chunk path, kept short.
            assert not hit.block_ids, "a hit only at (re)admission"
            num_computed_tokens = request.num_computed_tokens
            num_tokens_need_slot = num_computed_tokens + num_new_tokens + num_lookahead_tokens
            num_required = -(-num_tokens_need_slot // self.block_size)
            num_new_pages = num_required - len(pages.block_ids)
            if num_new_pages > 0 and not self._take_pages(pages, num_new_pages):
                return False
            if num_new_pages > 0:
                self._table_tuples.pop(request_id, None)
            pages.num_computed_tokens = num_computed_tokens
            return True
        return self._admit(request, num_new_tokens, hit, num_lookahead_tokens)

    def _admit(
        self, request: Request, num_new_tokens: int, hit: PrefixHit, num_lookahead_tokens: int
    ) -> bool:
        """(Re)admission, the request holds no pages yet: lock the hit's path, then take
        pages for the rest (evicting unlocked leaves if needed)."""
        request_id = request.request_id
        num_computed_tokens = request.num_computed_tokens + hit.num_tokens
        num_required = cdiv(
            num_computed_tokens + num_new_tokens + num_lookahead_tokens, self.block_size
        )
        num_new_pages = num_required - len(hit.block_ids)
        assert num_new_pages >= 0
        node = hit.node
        assert isinstance(node, TreeNode) or node is None
        if node is not None:
            self.tree.lock(node)
        num_available = len(self.free_pool) + self.tree.evictable_num_pages
        if num_new_pages > num_available:
            if node is not None:
                self.tree.unlock(node)
            return False
        root = self.tree.root(request.salt_key) if self.enable_caching else None
        pages = self._requests[request_id] = _RequestPages(root)
        self._tables[request_id] = pages.block_ids
        if node is not None:
            pages.block_ids.extend(hit.block_ids)
            pages.num_tree_pages = len(hit.block_ids)
            pages.last_node = node
            add_at(self.ref_cnt, hit.block_ids, 1)
        taken = self._take_pages(pages, num_new_pages)
        assert taken
        self._table_tuples.pop(request_id, None)
        pages.num_computed_tokens = num_computed_tokens
        return True

    def _take_pages(self, pages: _RequestPages, num_pages: int) -> bool:
        """Append num_pages pages from the free pool (evicting if needed) to a block table."""
        if num_pages == 0:
            return True
        free_pool = self.free_pool
        if num_pages > len(free_pool):
            if num_pages > len(free_pool) + self.tree.evictable_num_pages:
                return False
            self._evict(num_pages - len(free_pool))
        new_block_ids = [free_pool.popleft() for _ in range(num_pages)]
        ids = ids_of(new_block_ids)  # one conversion (many ids), two uses
        self._check_unheld(ids, "a free page had holders")
        add_at(self.ref_cnt, ids, 1)
        pages.block_ids.extend(new_block_ids)
        return True

    def evict_cached_free(self, num_pages_max: int) -> int:
        """Fault point: evict up to `num_pages_max` unlocked LRU pages to the free pool."""
        num_pages = min(num_pages_max, self.tree.evictable_num_pages)
        if num_pages > 0:
            self._evict(num_pages)
        return num_pages

    def _evict(self, num_pages: int) -> None:
        freed = self.tree.evict(num_pages)
        assert len(freed) >= num_pages, "evictable_num_pages promised enough pages"
        if freed:
            self._check_unheld(freed, "evicted a page a request holds")
        self.free_pool.extend(freed)

    def _check_unheld(self, block_ids: BlockIds, message: str) -> None:
        """Pages going to (or leaving) the free pool have no holder."""
        assert not any_at(self.ref_cnt, block_ids), message

    # -- after a step ----------------------------------------------------------------------

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        """cache_unfinished_req: insert the full written pages not in the tree yet."""
        pages = self._requests[request.request_id]
        assert num_computed_tokens <= len(pages.block_ids) * self.block_size
        is_decode = (
            num_computed_tokens == request.num_tokens
            and num_computed_tokens - pages.num_computed_tokens == 1
        )
        pages.num_computed_tokens = num_computed_tokens
        if self.enable_caching and not is_decode:  # decode pages go in at finish (SGLang)
            self._cache_unfinished(request, pages)
        return pages.num_computed_tokens

    def _cache_unfinished(self, request: Request, pages: _RequestPages) -> None:
        """SGLang's cache_unfinished_req: the request's full written pages not in the tree
        yet go in, and its prefix (num_tree_pages) advances to them."""
        num_full_pages = pages.num_computed_tokens // self.block_size
        if num_full_pages > pages.num_tree_pages:
            self._insert(request, pages, num_full_pages)

    def _insert(self, request: Request, pages: _RequestPages, num_full_pages: int) -> None:
        node = pages.last_node
        assert node is not None and node.depth_tokens == pages.num_tree_pages * self.block_size
        tree_block_ids, new_node = self.tree.insert(
            node,
            request.all_token_ids,
            num_full_pages * self.block_size,
            pages.block_ids,
            request.block_hashes,
        )
        block_ids = pages.block_ids
        first = pages.num_tree_pages
        assert len(tree_block_ids) == num_full_pages - first
        if self.change_log is not None:  # hashed now (or swapped for the tree's page below)
            self.change_log.extend(block_ids[first:num_full_pages])
            self.change_log.extend(tree_block_ids)
        if tree_block_ids == block_ids[first:num_full_pages]:
            tree_block_ids = []  # the common case: the tree took the request's own pages
        for offset, tree_block_id in enumerate(tree_block_ids):
            own = block_ids[first + offset]
            if tree_block_id != own:  # the tree already held this content
                self._release_duplicate(own)
                self.ref_cnt[tree_block_id] += 1
                block_ids[first + offset] = tree_block_id
                self._table_tuples.pop(request.request_id, None)
                if self.rewritten_req_ids is not None:
                    self.rewritten_req_ids.add(request.request_id)
        self.tree.lock(new_node)
        self.tree.unlock(node)
        pages.last_node = new_node
        pages.num_tree_pages = num_full_pages

    def _release_duplicate(self, block_id: int) -> None:
        self.ref_cnt[block_id] -= 1
        assert self.ref_cnt[block_id] == 0, "a private page has one holder"
        self.free_pool.append(block_id)

    def _forget(self, request_id: str) -> _RequestPages | None:
        """The request's pages, no longer its (None: it held none); its tables go too."""
        pages = self._requests.pop(request_id, None)
        if pages is None:
            return None
        table = self._tables.pop(request_id)
        assert table is pages.block_ids, "the snapshot's table is the request's own list"
        self._table_tuples.pop(request_id, None)
        return pages

    def free(self, request: Request, *, aborted: bool = False) -> None:
        """cache_finished_req: insert written full pages, free the private rest, unlock."""
        pages = self._forget(request.request_id)
        if pages is None:
            return
        if self.enable_caching:
            num_full_pages = pages.num_computed_tokens // self.block_size
            if num_full_pages > pages.num_tree_pages:
                self._insert(request, pages, num_full_pages)
        block_ids = pages.block_ids
        tree_ids = block_ids[: pages.num_tree_pages]
        private_ids = block_ids[pages.num_tree_pages :]
        add_at(self.ref_cnt, tree_ids, -1)
        if private_ids:
            freed = release_at(self.ref_cnt, private_ids)
            assert freed == private_ids, "a private page had other holders"
            self.free_pool.extend(reversed(private_ids))
        if pages.last_node is not None:
            self.tree.unlock(pages.last_node)

    # -- views -----------------------------------------------------------------------------

    def block_table(self, request_id: str) -> tuple[int, ...]:
        table = self._table_tuples.get(request_id)
        if table is None:
            table = tuple(self._requests[request_id].block_ids)
            self._table_tuples[request_id] = table
        return table

    def num_free_blocks(self) -> int:
        return len(self.free_pool) + self.tree.evictable_num_pages

    def num_evicted_blocks(self) -> int:
        return self.tree.num_evicted_pages

    def num_computed_tokens_of(self, request_id: str) -> int:
        pages = self._requests.get(request_id)
        return -1 if pages is None else pages.num_computed_tokens

    def holders(self) -> Sequence[str]:
        return list(self._requests)

    def kv_snapshot(self) -> RadixKVSnapshot:
        return RadixKVSnapshot(self)


class RadixKVSnapshot(ManagerSnapshot):
    """`KVSnapshot` of the radix manager (valid until the next step); see the module doc."""

    __slots__ = ()
    _manager: RadixKVManager

    def free_block_ids(self) -> Sequence[int]:
        return self._manager.free_pool

    def cached_blocks(self) -> Mapping[int, bytes]:
        return self._manager.tree.page_hash

    def block_tables(self) -> Mapping[str, Sequence[int]]:
        return self._manager._tables

    def num_computed_tokens(self) -> Mapping[str, int]:
        return {rid: p.num_computed_tokens for rid, p in self._manager._requests.items()}

    def take_changed_block_ids(self) -> Collection[int] | None:
        """Blocks whose ref_cnt, hash or free-pool entries changed since the last call; None
        on the first (it turns the logs on). Tree evictions reach the free pool, which
        notes them. See invariants/pool_delta.py."""
        manager = self._manager
        changed = manager.change_log
        manager.change_log = manager.free_pool.change_log = []
        return changed

    def take_rewritten_req_ids(self) -> Collection[str]:
        """Requests whose table had an entry replaced in place (a page the tree held)."""
        manager = self._manager
        rewritten, manager.rewritten_req_ids = manager.rewritten_req_ids or set(), set()
        return rewritten
