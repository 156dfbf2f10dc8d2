"""Reading SGLang's per-request KV rows (`ReqToTokenPool.req_to_token`) as slot tuples.

A row is rewritten in place when the tree deduplicates a request's freshly computed KV onto
slots it already holds (`checkpoint` -> insert), so every step reads the whole row again;
the tuple of the last read is reused while its prefix is unchanged (a decode step then
costs one numpy comparison and the new slots). The shadow KV re-verifies any key whose slot
changed.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RowReader:
    """Slot tuples of requests' req_to_token rows, cached per request id."""

    def __init__(self, req_to_token: Any) -> None:
        self._rows = req_to_token.numpy()  # a view: the CPU tensor's storage, no copy
        self._cache: dict[str, tuple[np.ndarray, tuple[int, ...]]] = {}

    def slots(self, request_id: str, req_pool_idx: int, length: int) -> tuple[int, ...]:
        """Slots [0, length) of row `req_pool_idx` (the same tuple object when unchanged)."""
        assert 0 <= req_pool_idx < self._rows.shape[0] and 0 <= length <= self._rows.shape[1]
        row = self._rows[req_pool_idx, :length].astype(np.int64)
        cached = self._cache.get(request_id)
        if cached is not None:
            old, old_tuple = cached
            n = min(old.size, length)
            if np.array_equal(old[:n], row[:n]):
                if n == length == old.size:
                    return old_tuple
                if n == old.size:
                    out = old_tuple + tuple(row[n:].tolist())
                    self._cache[request_id] = (row, out)
                    return out
        out = tuple(row.tolist())
        self._cache[request_id] = (row, out)
        return out

    def read(self, req_pool_idx: int, length: int) -> np.ndarray:
        """Slots [0, length) of a row, uncached."""
        return self._rows[req_pool_idx, :length].astype(np.int64)

    def forget(self, request_id: str) -> None:
        self._cache.pop(request_id, None)


def page_table(slots: tuple[int, ...], page_size: int) -> tuple[int, ...]:
    """The page of every page_size-th token: what a paged kernel's page table holds."""
    if page_size == 1:
        return slots
    return tuple(s // page_size for s in slots[::page_size])
