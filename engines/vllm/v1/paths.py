"""Rare paths of vLLM v1's scheduler that its SchedulerOutput does not show, counted by
wrapping one of its methods on the instance (vLLM's classes are untouched).

sliding-window frees
    A SlidingWindowManager frees the blocks before a request's window (the KV snapshot's
    num_sliding_window_blocks_freed, for the coverage counts): `count_window_frees`.

preempt-scheduled-same-step
    Under the priority policy, `schedule()` may preempt a running request it already
    scheduled earlier in the same call (the lowest-priority one), taking back its tokens
    and its new blocks. The output then lists the request as preempted and not as
    scheduled, so only the call order tells: `allocate_slots` granted the request slots in
    this `schedule()` call, then preempted it::

        schedule():  allocate_slots(r1) ok, allocate_slots(r2) ok, allocate_slots(r3) None
                     -> preempts r2               r2 was scheduled in this very call

cache-aware-reorder
    From 0.34.0, `cache_aware_admission_window` lets `schedule()` move waiting requests
    with a deeper cached prefix ahead of earlier arrivals in the window
    (`_reorder_waiting_by_cached_prefix`): counted when a call changed the queue's order
    (`count_cache_aware_reorders`; a release without the method does not count it).
"""

from __future__ import annotations

from typing import Any

from schedcheck.engines.vllm.v1 import eras


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


def count_window_frees(manager: Any) -> list[int]:
    """Wrap a SlidingWindowManager's `_remove_blocks_in_range` (called by
    remove_skipped_blocks) to count the calls that free at least one block; returns the
    one-element counter. It frees backwards from the range's last block and stops at the
    first null block, so a call frees something iff that last block is not null."""
    counter = [0]
    if not eras.frees_blocks_in_range(manager):  # before 0.2x: one method frees
        return _count_skipped_block_frees(manager, counter)
    original = manager._remove_blocks_in_range
    null_block = manager._null_block
    req_to_blocks = manager.req_to_blocks

    def counted(request_id: str, first_block: int, last_block: int) -> None:
        blocks = req_to_blocks.get(request_id, ())
        last = min(last_block, len(blocks))
        if first_block < last and blocks[last - 1] is not null_block:
            counter[0] += 1
        original(request_id, first_block, last_block)

    manager._remove_blocks_in_range = counted
    return counter


def _count_skipped_block_frees(manager: Any, counter: list[int]) -> list[int]:
    """Older releases (no `_remove_blocks_in_range`): wrap `remove_skipped_blocks`, which
    replaces the freed blocks of the table by the null block, and count the calls after
    which the request's table holds more null blocks than before."""
    original = manager.remove_skipped_blocks
    null_block = manager._null_block
    req_to_blocks = manager.req_to_blocks

    def num_null(request_id: str) -> int:
        return sum(b is null_block for b in req_to_blocks.get(request_id, ()))

    def counted(request_id: str, *args: object, **kwargs: object) -> None:
        before = num_null(request_id)
        original(request_id, *args, **kwargs)
        counter[0] += num_null(request_id) > before

    manager.remove_skipped_blocks = counted
    return counter


def count_cache_aware_reorders(scheduler: Any) -> list[int] | None:
    """Wrap the scheduler's `_reorder_waiting_by_cached_prefix` to count the calls that
    changed the waiting queue's order; returns the one-element counter, or None where the
    release has no cache-aware admission (the path is then not reachable, not unreached)."""
    original = getattr(scheduler, "_reorder_waiting_by_cached_prefix", None)
    if original is None:
        return None
    counter = [0]

    def counted() -> None:
        before = [r.request_id for r in scheduler.waiting]
        original()
        counter[0] += [r.request_id for r in scheduler.waiting] != before

    scheduler._reorder_waiting_by_cached_prefix = counted
    return counter
