"""The simulator's engine-level fault points (sim/faults.py) through vLLM's own calls.

- preempt: `Scheduler.reset_prefix_cache(reset_running_requests=True)`: every running
  request preempted by vLLM's own `_preempt_request` and the prefix cache emptied, as an
  RL trainer's weight update does between two rollouts (`LLM.reset_prefix_cache`, the
  engine core's utility call). Only between synchronous steps (nothing in flight: with a
  step in flight vLLM drops its stale output, which the simulator's runner has already
  handed on), and only in a release whose reset takes `reset_running_requests` (0.12.0
  on: eras.py);
- evict: `Scheduler.reset_prefix_cache()`: the prefix cache emptied, between steps with no
  request running (vLLM refuses while a block is held: nothing applied);
- reduced-budget: not applied.

The requests a reset preempted are preempted outside `schedule()`: vLLM 0.34.0 lists them
in its next SchedulerOutput (`reset_preempted_req_ids`) and may schedule them again in that
same output. `FaultPoints` keeps them, so that the adapter lists them in that step's
`preempted_req_ids` whatever the release, and leaves them out of its check for a request
"scheduled and preempted by one call" (a bug of 0.10.1.1 and 0.11.0, inside the call).
"""

from __future__ import annotations

from typing import Any

from schedcheck.engines.vllm.v1 import eras


class FaultPoints:
    """The fault points of one vllm-v1 engine, and the requests they preempted."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.preempted: set[str] = set()  # for the next step's output
        self._resets_running = eras.resets_running_requests(scheduler)

    def inject(self, kind: str, between_steps: bool) -> str | None:
        """Fire `kind` now (`between_steps`: no step in flight); what it did, or None."""
        if kind == "preempt" and between_steps and self._resets_running:
            running = sorted(r.request_id for r in self.scheduler.running)
            if not running:
                return None
            self.scheduler.reset_prefix_cache(reset_running_requests=True)
            self.preempted.update(running)
            return f"reset_prefix_cache(reset_running_requests=True): preempted {running}"
        idle = between_steps and not self.scheduler.running  # else vLLM refuses, warning
        if kind == "evict" and idle and self.scheduler.reset_prefix_cache():
            return "reset_prefix_cache(): the prefix cache emptied"
        return None

    def take_preempted(self) -> set[str]:
        """The requests preempted since the last step, once."""
        out, self.preempted = self.preempted, set()
        return out
