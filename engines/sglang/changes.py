"""SGLang's KV allocator, watched: which slots entered or left the free lists since the
last check, so that the pool check looks at those slots only (invariants/pool_delta.py).

SGLang keeps no change log of its pool. Without one the pool check sweeps the whole pool
every step: O(pool), 19 ms a step at 65,536 blocks of 16 slots. The allocator's own entry
points that hand out and take back pages are wrapped on the instance::

    alloc, alloc_extend, alloc_decode   the pages of the slots they return leave the free
                                        lists (a page is handed out whole)
    free (page size 1),                 those slots (pages) are free again; a free inside
    _release_page_ids (paged)           a free group is noted when the group releases it

Kept here: a free mask per slot and the slots changed since the last `take_changed`.

The mask is taken for SGLang's state only while its count equals the allocator's own
(`available_size()`, read at every take). On any difference (a double free lists a slot
twice; an entry point not wrapped here moved a page) `take_changed` answers None. The
pool check then sweeps the whole pool, which reads SGLang's own lists and words what it
finds, and the mask is rebuilt from those lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_ALLOCS = ("alloc", "alloc_extend", "alloc_decode")


class AllocatorLog:
    """One allocator, watched from its construction on (the module docstring says how)."""

    def __init__(self, allocator: Any, num_slots: int, page_size: int) -> None:
        assert num_slots >= 1 and page_size >= 1
        self.allocator = allocator
        self.page_size = page_size
        self.free = np.zeros(num_slots, bool)  # per slot: in SGLang's free lists
        self.num_free = 0  # slots marked in `free`
        self.changed: list[IntArray] = []  # slot arrays noted since the last take
        self.stale = True  # the mask is not SGLang's state: rebuild before answering
        for name in _ALLOCS:  # bounded: three entry points
            if hasattr(allocator, name):
                setattr(allocator, name, self._allocating(getattr(allocator, name)))
        if page_size == 1:
            allocator.free = self._freeing_slots(allocator.free)
        else:
            allocator._release_page_ids = self._releasing_pages(allocator._release_page_ids)

    def take_changed(self, free_slots: Callable[[], IntArray]) -> IntArray | None:
        """The slots whose free state changed since the last take (any order, repeats);
        None when the mask was not SGLang's state (then rebuilt from `free_slots()`, read
        only then: O(free slots))."""
        if self.stale or self.num_free != int(self.allocator.available_size()):
            self._rebuild(free_slots())
            return None
        changed = np.concatenate(self.changed) if self.changed else np.zeros(0, np.int64)
        self.changed = []
        return changed

    def is_free(self, slots: IntArray) -> BoolArray:
        """Per slot: in SGLang's free lists, as the watched entry points left them."""
        return self.free[slots]

    # -- the wrapped entry points -----------------------------------------------------------

    def _allocating(self, alloc: Any) -> Any:
        def allocating(*args: Any, **kwargs: Any) -> Any:
            out = alloc(*args, **kwargs)
            if out is not None:
                self._mark(self._whole_pages(out.numpy()), False)
            return out

        return allocating

    def _freeing_slots(self, free: Any) -> Any:
        def freeing(free_index: Any) -> Any:
            grouped = self.allocator.free_group is not None  # noted at the group's release
            result = free(free_index)
            if not grouped and free_index.numel():
                self._mark(free_index.numpy().astype(np.int64), True)
            return result

        return freeing

    def _releasing_pages(self, release: Any) -> Any:
        def releasing(*page_ids: Any) -> Any:
            result = release(*page_ids)
            for pages in page_ids:  # bounded: the call's arguments
                self._mark(self._slots_of_pages(pages.numpy().astype(np.int64)), True)
            return result

        return releasing

    # -- the mask ---------------------------------------------------------------------------

    def _whole_pages(self, slots: np.ndarray) -> IntArray:
        """Every slot of the pages `slots` lie in."""
        if self.page_size == 1:
            return slots.astype(np.int64)
        return self._slots_of_pages(np.unique(slots.astype(np.int64) // self.page_size))

    def _slots_of_pages(self, pages: IntArray) -> IntArray:
        if self.page_size == 1:
            return pages
        offsets = np.arange(self.page_size, dtype=np.int64)
        return (pages[:, None] * self.page_size + offsets).ravel()

    def _mark(self, slots: IntArray, free: bool) -> None:
        """Slots entered (free) or left the free lists; one outside the pool makes the
        mask stale (the sweep words it)."""
        if slots.size and (slots.min() < 0 or slots.max() >= self.free.size):
            self.stale = True
            return
        slots = np.unique(slots)  # a slot freed twice in one call is counted once
        self.num_free += int(np.count_nonzero(self.free[slots] != free)) * (1 if free else -1)
        self.free[slots] = free
        self.changed.append(slots)

    def _rebuild(self, free_slots: IntArray) -> None:
        self.free[:] = False
        inside = free_slots[(free_slots >= 0) & (free_slots < self.free.size)]
        self.free[inside] = True
        self.num_free = int(np.count_nonzero(self.free))
        self.changed = []
        self.stale = False
