"""Live, read-only views that the block managers' `KVSnapshot`s hand out without copying."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt


def readonly_view(array: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """A view of `array` that cannot be written through; it follows later writes to `array`."""
    view = array.view()
    view.flags.writeable = False
    return view


class KeysSequence(Sequence[int]):
    """The keys of an OrderedDict as a Sequence: iteration, len and `in` cost no copy.

    Indexing materializes the keys once per call site (it is only for convenience).
    """

    __slots__ = ("_queue",)

    def __init__(self, queue: OrderedDict[int, None]) -> None:
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
    the manager must have `block_size`, `num_blocks` and `_ref_cnt_view`.
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

    def ref_cnt(self) -> npt.NDArray[np.int64]:
        view: npt.NDArray[np.int64] = self._manager._ref_cnt_view
        return view
