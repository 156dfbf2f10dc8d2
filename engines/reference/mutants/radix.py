"""Radix block manager mutants: subclasses of the clean `RadixKVManager`
(engines/reference/radix_manager.py), each re-creating an SGLang bug."""

from __future__ import annotations

import numpy as np

from schedcheck.engines.reference.mutants.parts import EngineParts
from schedcheck.engines.reference.per_block import BlockIds
from schedcheck.engines.reference.radix_cache import RadixCache
from schedcheck.engines.reference.radix_manager import RadixKVManager, _RequestPages
from schedcheck.engines.reference.request import Request


class RadixLeakChunkKV(RadixKVManager):
    """radix-leak-chunk-kv (bug class 13, sglang#1858).

    Changes `_release_duplicate`: when a chunk's pages duplicate pages already in the tree,
    the request switches to the tree's pages and the clean method returns its own
    duplicate to the free pool; this one drops the reference but never frees the page, so
    the pool leaks.
    """

    def _release_duplicate(self, block_id: int) -> None:
        self.ref_cnt[block_id] -= 1
        assert self.ref_cnt[block_id] == 0, "a private page has one holder"


class RadixAbortFreesTreePages(RadixKVManager):
    """radix-abort-frees-tree-pages (bug class 14, sglang#38355 / sglang#38319).

    Changes `free` for an aborted request: the clean method inserts its written pages into
    the tree and frees only its private pages; this one returns every page of its block
    table with no other holder to the free pool, including the pages the tree owns, which
    are then handed out again and overwritten. The tree is not strict and
    `_check_unheld` does not stop a page that is still held, so that the corruption reaches
    the block-pool invariants.
    """

    def __init__(self, num_blocks: int, page_size: int, enable_caching: bool) -> None:
        super().__init__(num_blocks, page_size, enable_caching)
        self.tree = RadixCache(page_size, strict=False)

    def free(self, request: Request, *, aborted: bool = False) -> None:
        if not aborted:
            super().free(request)
            return
        pages = self._forget(request.request_id)
        if pages is None:
            return
        self._free_every_page(pages)

    def _free_every_page(self, pages: _RequestPages) -> None:
        ids = np.asarray(pages.block_ids, dtype=np.int64)
        if ids.size:
            self.ref_cnt[ids] -= 1
            self.free_pool.extend(reversed(ids[self.ref_cnt[ids] == 0].tolist()))
        if pages.last_node is not None:
            self.tree.unlock(pages.last_node)

    def _check_unheld(self, block_ids: BlockIds, message: str) -> None:
        pass  # pages this bug freed are handed out while the tree still holds them


class RadixPrefixNotAdvanced(RadixKVManager):
    """radix-prefix-not-advanced (bug class 15, sglang#33996 / sglang#36855).

    Changes `_cache_unfinished`: the clean method inserts a chunk's new full pages and
    leaves the request's count at what ran; when the chunk completes no new page (the insert
    is skipped) this one resets the count to the tree prefix, so the request's next chunk
    restarts there, forever if chunks are shorter than a page.
    """

    def _cache_unfinished(self, request: Request, pages: _RequestPages) -> None:
        num_tree_pages = pages.num_tree_pages
        super()._cache_unfinished(request, pages)
        if pages.num_tree_pages == num_tree_pages:  # the insert was skipped
            pages.num_computed_tokens = num_tree_pages * self.block_size


PARTS: dict[str, EngineParts] = {
    "radix-leak-chunk-kv": EngineParts(radix=RadixLeakChunkKV),
    "radix-abort-frees-tree-pages": EngineParts(radix=RadixAbortFreesTreePages),
    "radix-prefix-not-advanced": EngineParts(radix=RadixPrefixNotAdvanced),
}
