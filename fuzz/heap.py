"""A campaign's one-time setup without the garbage collector: the first engine build
imports the engine's libraries (for vllm-v1 torch and vLLM, about 850,000 objects, which
live as long as the process), and a collector running meanwhile rescans the growing heap,
eight full collections: about 1.1 of the setup's 5 s CPU. With the collector paused for
the build and what it left frozen (gc.freeze: never scanned again, still freed by
reference counting), the setup takes 3.8 s, and the campaign's own full collections scan
only what its examples allocate (one a few hundred examples: 0.25 s before, 0.01 s).

Nothing an engine computes depends on when the collector runs. The freeze is undone when
the campaign ends (unless someone froze before it), so a process that runs several
campaigns (the tests) collects what they leave.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")


class SetupHeap:
    """`with SetupHeap() as heap: engine = heap.build(check_target, spec); ...`"""

    def __init__(self) -> None:
        self._unfreeze = False

    def __enter__(self) -> SetupHeap:
        self._unfreeze = gc.get_freeze_count() == 0
        return self

    def build(self, setup: Callable[..., T], *args: object) -> T:
        """setup(*args) with the collector paused, then every object alive frozen."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return setup(*args)
        finally:
            gc.freeze()
            if enabled:
                gc.enable()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._unfreeze:
            gc.unfreeze()
