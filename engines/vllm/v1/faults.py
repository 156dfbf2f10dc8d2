"""The simulator's engine-level fault points (sim/faults.py) through vLLM's own calls.

An RL trainer updates the weights between two rollouts: it pauses the engine, the engine
core resets the prefix cache once its pause is complete, and the trainer resumes it
(`pause_generation(mode, clear_cache=True)`, then `resume_scheduler()`). The fault points
take the same calls, in the same order:

- preempt: `Scheduler.reset_prefix_cache(reset_running_requests=True)`: every running
  request preempted by vLLM's own `_preempt_request` and the cache emptied. Between steps
  at once. With a step in flight (async scheduling), half the time (drawn) at once as
  well, as the engine core's utility call does between two steps of its busy loop: vLLM
  then drops the stale output of the steps in flight (`drop_stale_output`) and may resume
  the requests in the next step, while that output is still to come; the next output
  names the requests whose tokens it drops (`dropped_req_ids`: the simulator's runner
  forgets them too, and samples them again). Not where a step in flight runs drafts for a
  running request (the runner has judged them). Else as the pause "keep" does it:
  PAUSED_ALL (nothing scheduled, nothing counted unfinished) until the steps in flight
  are applied, then the reset and the resume. Only in a release whose reset takes
  `reset_running_requests` (0.12.0 on: eras.py);
- evict: `Scheduler.reset_prefix_cache()`, the cache emptied. With nothing running, at
  once; else as the pause "wait" does it: PAUSED_NEW (the running requests go on, none is
  admitted) until they have drained, then the reset and the resume;
- reduced-budget: not applied (no vLLM call sets one step's budget).

A pause is finished by `settle`, which the adapter calls before it answers whether work is
left and before each schedule(): so the simulator never sees an engine paused with nothing
to do. Pauses need `Scheduler.set_pause_state` (eras.pause_states); without it a fault
that would need one applies nothing.

::

    step in flight | preempt fires: PAUSED_ALL | step applied | reset, resume | schedule
    running a, b   | evict fires: PAUSED_NEW   | a, b run to their end | reset, resume

The requests a reset preempted are preempted outside `schedule()`: vLLM 0.34.0 lists them
in its next SchedulerOutput (`reset_preempted_req_ids`) and may schedule them again in that
same output. `FaultPoints` keeps them, so that the adapter lists them in that step's
`preempted_req_ids` whatever the release, and leaves them out of its check for a request
"scheduled and preempted by one call" (a bug of 0.10.1.1 and 0.11.0, inside the call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from typing import Any

import numpy as np

from schedcheck.engines.protocol import SchedulerOutput
from schedcheck.engines.vllm.v1 import eras

PAUSE_STATE_OF_MODE = {"keep": "PAUSED_ALL", "wait": "PAUSED_NEW"}  # the engine core's


class FaultPoints:
    """The fault points of one vllm-v1 engine, its pause, and the requests they preempted."""

    def __init__(self, scheduler: Any, turn_id: Callable[[str], str] = str) -> None:
        self.scheduler = scheduler
        self.turn_id = turn_id  # our name of a vLLM request (sessions.py)
        self.preempted: set[str] = set()  # for the next step's output
        self.dropped: tuple[str, ...] = ()  # the next output's dropped_req_ids
        self.pause_mode: str | None = None  # "keep" or "wait": a pause not finished yet
        self._resets_running = eras.resets_running_requests(scheduler)
        self._pause_states = eras.pause_states(scheduler)  # vLLM's PauseState, or None
        assert self._pause_states is None or self._resets_running, "pauses came after"
        # the rare paths (sim/coverage.py) this release can reach, and how often they were
        self.path_counts: dict[str, int] = {}
        if self._resets_running:
            self.path_counts["reset-with-step-in-flight"] = 0
        if self._pause_states is not None:
            self.path_counts["engine-paused"] = 0

    def inject(
        self, kind: str, in_flight: Sequence[SchedulerOutput], rng: np.random.Generator
    ) -> str | None:
        """Fire `kind` now, with the steps `in_flight` (scheduled, not yet updated); what
        it did, or None."""
        if self.pause_mode is not None or self.dropped:
            return None  # one pause at a time; a drop reaches the next output first
        between_steps = not in_flight
        if kind == "preempt" and self._resets_running and self.scheduler.running:
            if between_steps:
                return self._reset_running()
            running = {self.turn_id(r.request_id) for r in self.scheduler.running}
            chunks = [r for o in in_flight for r in o.scheduled if r.request_id in running]
            drafts = any(r.spec_token_ids for r in chunks)  # the runner keeps what it drew
            if not drafts and rng.random() < 0.5:  # drawn: either is production's
                self.dropped = tuple(sorted({r.request_id for r in chunks if r.samples}))
                self.path_counts["reset-with-step-in-flight"] += 1
                return f"{self._reset_running()} with a step in flight (its output dropped)"
            return self._pause("keep", "the steps in flight applied, then the running reset")
        if kind == "evict":
            if between_steps and not self.scheduler.running:
                return "reset_prefix_cache(): the prefix cache emptied" if self._reset() else None
            return self._pause("wait", "the running requests drained, then the cache reset")
        return None

    def settle(self, apply_empty_heads: Callable[[], None], in_flight: Sized) -> str | None:
        """Finish a pause whose drain is done (the empty steps at the head of the batch
        queue applied, then nothing in flight, and vLLM, paused, has no request left to
        step: the engine core's `_pause_complete`): the cache reset as its `_finish_pause`
        does, then the trainer's resume. What it did, or None."""
        if self.pause_mode is None:
            return None
        apply_empty_heads()
        if len(in_flight) or self.scheduler.has_requests():
            return None
        assert self._pause_states is not None, "a pause began: the release has them"
        self.pause_mode = None
        self.path_counts["engine-paused"] += 1
        what = self._reset_running()  # "keep": the running ones preempted; "wait": none run
        self.scheduler.set_pause_state(self._pause_states.UNPAUSED)
        return f"{what}; resume_scheduler()"

    def steps_while_paused(self) -> bool:
        """Paused, vLLM is still stepped while it has requests (finished ones to report
        included: EngineCore.has_work), though none counts as unfinished."""
        return self.pause_mode is not None and self.scheduler.has_requests()

    def take_preempted(self) -> tuple[set[str], tuple[str, ...]]:
        """The requests preempted since the last step, and those of them whose samples in
        the steps in flight vLLM drops; once."""
        out, self.preempted, self.dropped = (self.preempted, self.dropped), set(), ()
        return out

    def _pause(self, mode: str, until: str) -> str | None:
        if self._pause_states is None:
            return None
        state = PAUSE_STATE_OF_MODE[mode]
        self.scheduler.set_pause_state(getattr(self._pause_states, state))
        self.pause_mode = mode
        return f"pause_scheduler(mode={mode!r}): {state} until {until}"

    def _reset_running(self) -> str:
        running = sorted(r.request_id for r in self.scheduler.running)
        self.scheduler.reset_prefix_cache(reset_running_requests=True)
        self.preempted.update(running)
        return f"reset_prefix_cache(reset_running_requests=True): preempted {running}"

    def _reset(self) -> bool:
        """The cache emptied where nothing holds a block (vLLM refuses otherwise: False)."""
        return bool(self.scheduler.reset_prefix_cache())
