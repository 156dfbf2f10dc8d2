"""Live, read-only views that the block managers' `KVSnapshot`s hand out without copying."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import overload

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
