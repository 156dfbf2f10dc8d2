"""Reading SGLang's per-request KV rows (`ReqToTokenPool.req_to_token`) as slot tuples.

A row is rewritten in place when the tree deduplicates a request's freshly computed KV onto
slots it already holds (`checkpoint` -> insert), so every step reads the whole row again;
the tuples of the last read are reused while its prefix is unchanged (a decode step then
costs one numpy comparison and the new slots). The shadow KV re-verifies any key whose slot
changed.

Beside each row's slots, its page table (the page of every page_size-th slot: what a paged
kernel's page table holds), kept the same way: extended by the new pages only, the same
tuple object while the row is unchanged (the shadow KV then skips comparing the table).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RowReader:
    """Slot tuples and page tables of requests' req_to_token rows, cached per request id."""

    def __init__(self, req_to_token: Any, page_size: int = 1) -> None:
        assert page_size >= 1
        self._rows = req_to_token.numpy()  # a view: the CPU tensor's storage, no copy
        self._page = page_size
        # request id -> (row as last read, its slots, its page table)
        self._cache: dict[str, tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]] = {}

    def slots_and_pages(
        self, request_id: str, req_pool_idx: int, length: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Slots [0, length) of row `req_pool_idx`, and their page table (each the same
        tuple object while the row is unchanged)."""
        assert 0 <= req_pool_idx < self._rows.shape[0] and 0 <= length <= self._rows.shape[1]
        row = self._rows[req_pool_idx, :length].astype(np.int64)
        cached = self._cache.get(request_id)
        if cached is not None:
            old, old_slots, old_pages = cached
            n = min(old.size, length)
            if np.array_equal(old[:n], row[:n]):
                if n == length == old.size:
                    return old_slots, old_pages
                if n == old.size:  # grown at its end: the new slots and pages only
                    first_new_page = -(-n // self._page) * self._page
                    return self._keep(
                        request_id,
                        row,
                        old_slots + tuple(row[n:].tolist()),
                        old_pages + self._pages(row, first_new_page),
                    )
        return self._keep(request_id, row, tuple(row.tolist()), self._pages(row, 0))

    def read(self, req_pool_idx: int, length: int) -> np.ndarray:
        """Slots [0, length) of a row, uncached."""
        return self._rows[req_pool_idx, :length].astype(np.int64)

    def forget(self, request_id: str) -> None:
        self._cache.pop(request_id, None)

    def _pages(self, row: np.ndarray, first_slot: int) -> tuple[int, ...]:
        """The page table of row[first_slot:] (first_slot on a page boundary); none at page
        size 1, where a row's page table is its slots (`_keep`)."""
        return page_table(row[first_slot:], self._page) if self._page > 1 else ()

    def _keep(
        self, request_id: str, row: np.ndarray, slots: tuple[int, ...], pages: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if self._page == 1:
            pages = slots  # a page is a slot: one tuple
        self._cache[request_id] = (row, slots, pages)
        return slots, pages


def page_table(slots: np.ndarray, page_size: int) -> tuple[int, ...]:
    """The page of slots[0], slots[page_size], ... (slots starting on a page): what a paged
    kernel's page table holds."""
    return tuple((slots[::page_size] // page_size).tolist())
