"""Rare paths of vLLM v1's scheduler that its SchedulerOutput does not show, counted by
wrapping two of its methods on the instance (vLLM's classes are untouched).

preempt-scheduled-same-step
    Under the priority policy, `schedule()` may preempt a running request it already
    scheduled earlier in the same call (the lowest-priority one), taking back its tokens
    and its new blocks. The output then lists the request as preempted and not as
    scheduled, so only the call order tells: `allocate_slots` granted the request slots in
    this `schedule()` call, then `_preempt_request` took it::

        schedule():  allocate_slots(r1) ok, allocate_slots(r2) ok, allocate_slots(r3) None
                     -> _preempt_request(r2)      r2 was scheduled in this very call
"""

from __future__ import annotations

from typing import Any


class SameStepPreemptions:
    """Counts preemptions of a request granted slots earlier in the same schedule() call."""

    def __init__(self, scheduler: Any) -> None:
        self.count = 0
        self._granted: set[str] = set()  # request ids given slots in this schedule() call
        manager = scheduler.kv_cache_manager
        allocate, preempt = manager.allocate_slots, scheduler._preempt_request

        def allocate_slots(request: Any, *args: Any, **kwargs: Any) -> Any:
            blocks = allocate(request, *args, **kwargs)
            if blocks is not None:
                self._granted.add(request.request_id)
            return blocks

        def preempt_request(request: Any, *args: Any, **kwargs: Any) -> Any:
            if request.request_id in self._granted:
                self.count += 1
            return preempt(request, *args, **kwargs)

        manager.allocate_slots = allocate_slots
        scheduler._preempt_request = preempt_request

    def new_step(self) -> None:
        """Call before each schedule()."""
        self._granted.clear()
