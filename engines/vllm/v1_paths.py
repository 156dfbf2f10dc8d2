"""Rare paths of vLLM v1's scheduler that its SchedulerOutput does not show, counted by
wrapping one of its methods on the instance (vLLM's classes are untouched).

preempt-scheduled-same-step
    Under the priority policy, `schedule()` may preempt a running request it already
    scheduled earlier in the same call (the lowest-priority one), taking back its tokens
    and its new blocks. The output then lists the request as preempted and not as
    scheduled, so only the call order tells: `allocate_slots` granted the request slots in
    this `schedule()` call, then preempted it::

        schedule():  allocate_slots(r1) ok, allocate_slots(r2) ok, allocate_slots(r3) None
                     -> preempts r2               r2 was scheduled in this very call
"""

from __future__ import annotations

from typing import Any


class SameStepPreemptions:
    """Counts preemptions of a request granted slots earlier in the same schedule() call:
    the requests `allocate_slots` granted in the call that the step lists as preempted
    (a preempted request is not scheduled again in the same call). Every v1 release
    allocates through `allocate_slots`; only 0.12.0 on preempts through
    `_preempt_request`, so the preempted ids come from the adapter."""

    def __init__(self, scheduler: Any) -> None:
        self.count = 0
        self._granted: set[str] = set()  # request ids given slots in this schedule() call
        manager = scheduler.kv_cache_manager
        allocate = manager.allocate_slots

        def allocate_slots(request: Any, *args: Any, **kwargs: Any) -> Any:
            blocks = allocate(request, *args, **kwargs)
            if blocks is not None:
                self._granted.add(request.request_id)
            return blocks

        manager.allocate_slots = allocate_slots

    def new_step(self) -> None:
        """Call before each schedule()."""
        self._granted.clear()

    def end_step(self, preempted_req_ids: set[str]) -> None:
        """Call after schedule() with the step's preempted ids."""
        self.count += len(self._granted & preempted_req_ids)
