"""A radix tree over token ids at page granularity (SGLang's RadixCache design).

Each node holds a run of tokens (`key`, a multiple of page_size long) and the KV pages that
hold them (`block_ids`, one per page); a path from a root spells a cached prefix::

    page_size 4, two prompts cached: A = a0..a11, B = a0..a7 b8..b11
    root ─ [a0..a7 | pages 3, 8] ─┬─ [a8..a11  | page 5]     (A's tail)
                                  └─ [b8..b11  | page 2]     (B's tail)

One root per namespace (the request's extra key, i.e. its cache salt): requests with
different salts never share nodes. Children are keyed by the bytes of their first page.

`lock_ref` of a node counts the requests whose deepest held node lies in its subtree
(`lock` / `unlock` walk up to the root). Only leaves with lock_ref 0 are evicted, least
recently used first; an evicted leaf's parent may then become an evictable leaf. Recency
is a logical tick (one per match or insert), ties broken by node id, so eviction order never
depends on wall time or hash order. The eviction heap is lazy: entries are validated when
popped (alive, leaf, unlocked, tick unchanged) and the heap is rebuilt when it outgrows the
tree.

The tree stores, for each of its pages, the content hash of that page's prefix (the
chained block hash of `block_hash.py`), so a snapshot can name tree pages by content.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

TokenArray = npt.NDArray[np.int64]


class TreeNode:
    __slots__ = (
        "alive",
        "block_ids",
        "children",
        "depth_tokens",
        "key",
        "last_access_tick",
        "lock_ref",
        "node_id",
        "parent",
    )

    def __init__(
        self,
        node_id: int,
        parent: TreeNode | None,
        key: TokenArray,
        block_ids: list[int],
        depth_tokens: int,
    ) -> None:
        self.node_id = node_id
        self.parent = parent
        self.children: dict[bytes, TreeNode] = {}
        self.key = key
        self.block_ids = block_ids
        self.depth_tokens = depth_tokens  # count of tokens from the root to this node's end
        self.lock_ref = 0
        self.last_access_tick = 0
        self.alive = True

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def __repr__(self) -> str:
        return (
            f"TreeNode(id={self.node_id}, tokens={self.key.size}, pages={self.block_ids}, "
            f"lock_ref={self.lock_ref}, depth_tokens={self.depth_tokens})"
        )


class RadixCache:
    def __init__(self, page_size: int, *, strict: bool = True) -> None:
        assert page_size >= 1
        self.page_size = page_size
        # strict: a page is in the tree at most once (asserted). Off only for a manager that
        # frees tree pages (a re-created SGLang bug), so that the corruption it causes
        # reaches the invariants instead of stopping here.
        self._strict = strict
        self._roots: dict[bytes, TreeNode] = {}
        self._nodes: dict[int, TreeNode] = {}  # alive non-root nodes by id
        self._next_node_id = 0
        self._tick = 0
        self._evict_heap: list[tuple[int, int, TreeNode]] = []
        self.evictable_num_pages = 0  # pages of nodes with lock_ref == 0
        self.page_hash: dict[int, bytes] = {}  # every tree page -> its content hash
        self.num_evicted_pages = 0  # in total

    # -- structure -------------------------------------------------------------------------

    def root(self, namespace: bytes) -> TreeNode:
        node = self._roots.get(namespace)
        if node is None:
            node = self._roots[namespace] = self._new_node(None, _EMPTY, [], 0)
        return node

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    def match_prefix(
        self, root: TreeNode, tokens: TokenArray, num_tokens: int
    ) -> tuple[list[int], TreeNode]:
        """Pages of the longest cached prefix of tokens[:num_tokens] (page-floored).

        Splits a node when the match ends inside it, so the returned node ends exactly at
        the match; refreshes the recency of every node on the path.
        """
        assert root.is_root and 0 <= num_tokens <= tokens.size
        page_size = self.page_size
        limit_tokens = num_tokens // page_size * page_size
        tick = self._next_tick()
        node = root
        pos = 0
        block_ids: list[int] = []
        while pos < limit_tokens:  # bounded: pos grows by >= page_size per iteration
            child = node.children.get(tokens[pos : pos + page_size].tobytes())
            if child is None:
                break
            matched = self._match_len(child.key, tokens, pos, limit_tokens)
            self._touch(child, tick)
            ends_inside = matched < child.key.size
            if ends_inside:
                child = self._split(child, matched)
            block_ids.extend(child.block_ids)
            node = child
            pos += matched
            if ends_inside:
                break
        assert pos == len(block_ids) * page_size == node.depth_tokens
        return block_ids, node

    def insert(
        self,
        node: TreeNode,
        tokens: TokenArray,
        num_tokens: int,
        block_ids: Sequence[int],
        block_hashes: Sequence[bytes],
    ) -> tuple[list[int], TreeNode]:
        """Insert tokens[node.depth_tokens : num_tokens] below `node` with the caller's pages.

        ::

            tokens   | path to node (in the tree) | to insert                |
            0                  node.depth_tokens                        num_tokens
            returns: the tree's page for every page of "to insert" (the caller's own page
            where the tree had none; the tree's older page where it already held that
            content) and the node ending at num_tokens.

        `block_ids[i]` / `block_hashes[i]` are the caller's page / content hash of page i.
        """
        page_size = self.page_size
        assert num_tokens % page_size == 0 and node.depth_tokens < num_tokens <= tokens.size
        tick = self._next_tick()
        pos = node.depth_tokens
        tree_block_ids: list[int] = []
        while pos < num_tokens:  # bounded: pos grows by >= page_size per iteration
            child = node.children.get(tokens[pos : pos + page_size].tobytes())
            if child is None:
                child = self._add_leaf(node, tokens, pos, num_tokens, block_ids, block_hashes)
                child.last_access_tick = tick
                self._push_if_evictable(child)
                matched = num_tokens - pos
            else:
                matched = self._match_len(child.key, tokens, pos, num_tokens)
                self._touch(child, tick)
                if matched < child.key.size:
                    child = self._split(child, matched)
            tree_block_ids.extend(child.block_ids)
            node = child
            pos += matched
        assert pos == num_tokens == node.depth_tokens
        return tree_block_ids, node

    def lock(self, node: TreeNode) -> None:
        """One more request holds the path root..node."""
        while node.parent is not None:  # bounded by the depth
            assert node.alive, "locking an evicted node"
            if node.lock_ref == 0:
                self.evictable_num_pages -= len(node.block_ids)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: TreeNode) -> None:
        while node.parent is not None:  # bounded by the depth
            assert node.lock_ref > 0, "unlock without lock"
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_num_pages += len(node.block_ids)
                self._push_if_evictable(node)
            node = node.parent

    def evict(self, num_pages: int) -> list[int]:
        """Evict unlocked leaves, least recently used first, until num_pages pages are freed.

        Whole leaves go, so more than num_pages may come back; fewer only when nothing more
        is evictable. Returns the freed pages (each leaf's pages tail first).
        """
        freed: list[int] = []
        heap = self._evict_heap
        while len(freed) < num_pages and heap:  # bounded: every pop shrinks the heap
            tick, _, node = heapq.heappop(heap)
            if not self._is_evictable(node) or node.last_access_tick != tick:
                continue  # a stale entry
            freed.extend(reversed(node.block_ids))
            self.num_evicted_pages += len(node.block_ids)
            parent = self._delete_leaf(node)
            self._push_if_evictable(parent)
        return freed

    # -- helpers ---------------------------------------------------------------------------

    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick

    def _new_node(
        self, parent: TreeNode | None, key: TokenArray, block_ids: list[int], depth_tokens: int
    ) -> TreeNode:
        node = TreeNode(self._next_node_id, parent, key, block_ids, depth_tokens)
        self._next_node_id += 1
        if parent is not None:
            self._nodes[node.node_id] = node
        return node

    def _match_len(self, key: TokenArray, tokens: TokenArray, pos: int, limit: int) -> int:
        """Tokens of `key` matching tokens[pos:limit], floored to a page (>= 1 page here)."""
        num = min(key.size, limit - pos)
        mismatch = np.flatnonzero(key[:num] != tokens[pos : pos + num])
        matched = num if mismatch.size == 0 else int(mismatch[0])
        matched = matched // self.page_size * self.page_size
        assert matched >= self.page_size, "children are keyed by their first page"
        return matched

    def _touch(self, node: TreeNode, tick: int) -> None:
        node.last_access_tick = tick
        self._push_if_evictable(node)

    def _is_evictable(self, node: TreeNode) -> bool:
        return node.alive and node.parent is not None and not node.children and not node.lock_ref

    def _push_if_evictable(self, node: TreeNode) -> None:
        if self._is_evictable(node):
            heapq.heappush(self._evict_heap, (node.last_access_tick, node.node_id, node))
            if len(self._evict_heap) > 4 * len(self._nodes) + 1024:
                self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._evict_heap = [
            (n.last_access_tick, n.node_id, n)
            for n in self._nodes.values()
            if self._is_evictable(n)
        ]
        heapq.heapify(self._evict_heap)

    def _add_leaf(
        self,
        parent: TreeNode,
        tokens: TokenArray,
        start_tokens: int,
        stop_tokens: int,
        block_ids: Sequence[int],
        block_hashes: Sequence[bytes],
    ) -> TreeNode:
        page_size = self.page_size
        first_page, stop_page = start_tokens // page_size, stop_tokens // page_size
        pages = list(block_ids[first_page:stop_page])
        key = tokens[start_tokens:stop_tokens].copy()  # owned: no view of a request buffer
        leaf = self._new_node(parent, key, pages, stop_tokens)
        parent.children[key[:page_size].tobytes()] = leaf
        self.evictable_num_pages += len(pages)
        page_hash = self.page_hash
        for index in range(first_page, stop_page):
            assert not self._strict or block_ids[index] not in page_hash, "a page is in one node"
            page_hash[block_ids[index]] = block_hashes[index]
        return leaf

    def _split(self, child: TreeNode, num_tokens: int) -> TreeNode:
        """Cut `child` after num_tokens tokens; returns the new upper node.

        ::

            parent ─ [k0 .. k(n-1) | pages]          parent ─ [k0..k(m-1)] ─ [km..k(n-1)]
                      (child)                  ->              (upper)        (child)
        """
        page_size = self.page_size
        assert 0 < num_tokens < child.key.size and num_tokens % page_size == 0
        parent = child.parent
        assert parent is not None
        num_pages = num_tokens // page_size
        upper = self._new_node(
            parent,
            child.key[:num_tokens],
            child.block_ids[:num_pages],
            child.depth_tokens - child.key.size + num_tokens,
        )
        upper.lock_ref = child.lock_ref
        upper.last_access_tick = child.last_access_tick
        parent.children[child.key[:page_size].tobytes()] = upper
        child.key = child.key[num_tokens:]
        child.block_ids = child.block_ids[num_pages:]
        child.parent = upper
        upper.children[child.key[:page_size].tobytes()] = child
        return upper

    def _delete_leaf(self, node: TreeNode) -> TreeNode:
        parent = node.parent
        assert parent is not None and not node.children and not node.lock_ref
        del parent.children[node.key[: self.page_size].tobytes()]
        del self._nodes[node.node_id]
        node.alive = False
        self.evictable_num_pages -= len(node.block_ids)
        for block_id in node.block_ids:
            if self._strict:
                del self.page_hash[block_id]
            else:
                self.page_hash.pop(block_id, None)
        return parent


_EMPTY: TokenArray = np.zeros(0, dtype=np.int64)
