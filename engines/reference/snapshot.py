"""Live, read-only views that the block managers' `KVSnapshot`s hand out without copying."""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

G = TypeVar("G", bound=np.generic)


def readonly_view(array: npt.NDArray[G]) -> npt.NDArray[G]:
    """A view of `array` that cannot be written through; it follows later writes to `array`."""
    view = array.view()
    view.flags.writeable = False
    return view


class KeysSequence(Sequence[int]):
    """A queue of block ids (the pool's free queue) as a Sequence: len and `in` cost no
    copy, iteration what the queue's costs.

    Indexing materializes the keys once per call site (it is only for convenience).
    """

    __slots__ = ("_queue",)

    def __init__(self, queue: Collection[int]) -> None:
        self._queue = queue

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[int]:
        return iter(self._queue)

    def __contains__(self, value: object) -> bool:
        return value in self._queue

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...

    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        return list(self._queue)[index]

    def __repr__(self) -> str:
        return f"KeysSequence({list(self._queue)!r})"


class ManagerSnapshot:
    """What both block managers' snapshots share: the geometry and the live ref_cnt view.

    A subclass answers the rest (free queue, cached blocks, block tables) from its manager;
    the manager must have `block_size`, `num_blocks`, `_ref_cnt_view` and
    `num_evicted_blocks()`.
    """

    __slots__ = ("_manager",)

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    @property
    def block_size(self) -> int:
        return int(self._manager.block_size)

    @property
    def num_blocks(self) -> int:
        return int(self._manager.num_blocks)

    @property
    def num_evicted_blocks(self) -> int:
        """Cached blocks evicted for new allocations so far (read by sim/coverage.py)."""
        return int(self._manager.num_evicted_blocks())

    def ref_cnt(self) -> npt.NDArray[np.int64]:
        view: npt.NDArray[np.int64] = self._manager._ref_cnt_view
        return view


class CountedDeque(deque[int]):
    """A free pool of block ids (a deque) that counts each id's entries, so that `in` costs
    O(1) and an id queued twice shows, and notes the ids it gains or loses in `change_log`
    (a list, when a checker turned it on; an id may repeat) for the incremental block-pool check.

    Only the deque operations a block manager uses are counted (append, extend, popleft);
    the others raise rather than let the counts go stale.
    """

    __slots__ = ("change_log", "counts")

    def __init__(self, num_blocks: int) -> None:
        super().__init__(range(num_blocks))
        self.counts = [1] * num_blocks
        self.change_log: list[int] | None = None

    def append(self, block_id: int) -> None:
        super().append(block_id)
        self.counts[block_id] += 1
        if self.change_log is not None:
            self.change_log.append(block_id)

    def extend(self, block_ids: Iterable[int]) -> None:
        ids = list(block_ids)
        super().extend(ids)
        counts = self.counts
        for block_id in ids:  # bounded: the ids given
            counts[block_id] += 1
        if self.change_log is not None:
            self.change_log.extend(ids)

    def popleft(self) -> int:
        block_id = super().popleft()
        self.counts[block_id] -= 1
        if self.change_log is not None:
            self.change_log.append(block_id)
        return block_id

    def __contains__(self, block_id: object) -> bool:
        counts = self.counts
        return isinstance(block_id, int) and 0 <= block_id < len(counts) and counts[block_id] > 0

    def _uncounted(self, *args: object) -> None:
        raise NotImplementedError("CountedDeque counts append, extend and popleft only")

    appendleft = extendleft = pop = remove = clear = insert = rotate = _uncounted  # type: ignore[assignment]
