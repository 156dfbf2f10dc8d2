"""The block pool's free queue: LRU order as a doubly linked list in two arrays.

vLLM's FreeKVCacheBlockQueue links KVCacheBlock objects; here the links are int64 arrays
indexed by block id, closed into a ring by a sentinel S = num_blocks::

    S -> 7 -> 3 -> 9 -> 4 -> S            head 7 (evicted / reused first), tail 4

    popleft_many(2)      -> [7, 3]         S -> 9 -> 4 -> S
    append_many([3, 7])                    S -> 9 -> 4 -> 3 -> 7 -> S
    remove_many([4])     (a cache hit)     S -> 9 -> 3 -> 7 -> S

Each operation is one compiled pass over its blocks (free_queue_kernels.py), where an
OrderedDict costs a Python step a block: a prefill's hundreds of new blocks, a finished
request's thousands freed. `in_queue[b]` says whether b is queued; the pool hands it to
the pool check as its `in_free_queue` array (the same array, kept exact by every pass).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

IdArray = npt.NDArray[np.int64]


class FreeBlockQueue:
    """Block ids in LRU order; all of them at first, ascending."""

    __slots__ = ("_k", "in_queue", "links", "num_free_blocks")

    def __init__(self, num_blocks: int) -> None:
        assert num_blocks >= 1
        from schedcheck.engines.reference import free_queue_kernels  # numba: with an engine

        self._k = free_queue_kernels
        # block b's neighbours: links[0, b] the next, links[1, b] the one before; index
        # num_blocks is the sentinel (its next: the head, the one before it: the tail)
        self.links: IdArray = np.stack(
            [
                np.arange(1, num_blocks + 2, dtype=np.int64),
                np.arange(-1, num_blocks, dtype=np.int64),
            ]
        )
        self.links[0, num_blocks] = 0
        self.links[1, 0] = num_blocks
        self.in_queue: npt.NDArray[np.bool_] = np.ones(num_blocks, dtype=bool)
        self.num_free_blocks = num_blocks

    def __len__(self) -> int:
        return self.num_free_blocks

    def __contains__(self, block_id: object) -> bool:
        if not isinstance(block_id, int | np.integer):
            return False
        return bool(0 <= block_id < self.in_queue.size and self.in_queue[block_id])

    def __iter__(self) -> Iterator[int]:
        """Head first (a copy: the queue may change while the caller iterates)."""
        return iter(self.block_ids().tolist())

    def block_ids(self) -> IdArray:
        """The queued blocks, head first."""
        return self._k.walk(self.links, self.num_free_blocks)

    def popleft(self) -> int:
        """Unlink the block at the head."""
        assert self.num_free_blocks >= 1, "caller checks the free count"
        self.num_free_blocks -= 1
        return int(self._k.pop_one(self.links, self.in_queue))

    def popleft_many(self, num_blocks: int) -> IdArray:
        """Unlink the `num_blocks` blocks at the head, in queue order."""
        assert 0 <= num_blocks <= self.num_free_blocks, "caller checks the free count"
        out = np.empty(num_blocks, np.int64)
        self._k.pop_head(self.links, self.in_queue, out)
        self.num_free_blocks -= num_blocks
        return out

    def append_many(self, block_ids: IdArray) -> None:
        """Link `block_ids` (none queued already, each once) at the tail, in order."""
        linked = self._k.push_tail(self.links, self.in_queue, block_ids)
        self.num_free_blocks += linked
        assert linked == block_ids.size, f"block {block_ids[linked]} is queued already"

    def remove_many(self, block_ids: IdArray) -> int:
        """Unlink those of `block_ids` that are queued; how many were."""
        removed = int(self._k.unlink(self.links, self.in_queue, block_ids))
        self.num_free_blocks -= removed
        return removed
