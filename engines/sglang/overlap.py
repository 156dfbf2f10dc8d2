"""Overlap scheduling, SGLang's default (`Scheduler.event_loop_overlap`): batch N+1 is
scheduled and launched before batch N's result is processed, as the loop's async pipeline
(sim/pipelined.py, depth 2) runs a step while the previous one is still in flight::

    SGLang:   get_next_batch_to_run(N+1)  run_batch(N+1)  process_batch_result(N)
    adapter:  schedule() -> N+1 (N still queued)           update_from_output(N)

What SGLang does on the CPU side of its overlap loop, and only that, is done here:
`run_batch`'s counters, the batch's copy queued with its result in `result_queue`, the
result filled in and processed when the simulator hands N's sampled tokens over. SGLang's
own scheduler then sees what it sees in production: a queued result when it schedules
(`_reqs_finishing_inflight` leaves out the requests whose queued token finishes them),
requests it retracts while their token is in flight (their result is skipped:
`req.is_retracted`), aborted ones that run once more, a pause that first processes the
batch in flight.

A decode whose last token is still in flight reads it through SGLang's future map; the
adapter puts PLACEHOLDER_TOKEN_ID there and the simulator's runner fills it in. A request
retracted while it has a token in flight loses that token: it is named in the output's
`dropped_req_ids`, and the runner samples the position again when it runs once more.

Not driven: `SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP` and grammar sync (both process N
before launching N+1; off in a default server, asserted off here).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult

from schedcheck.engines.protocol import SchedulerOutput
from schedcheck.engines.sglang import faults

Process = Callable[[ScheduleBatch, GenerationBatchResult], None]


class LaunchQueue:
    """The batches launched and not processed yet, oldest first: SGLang's own
    `result_queue` (its batch copies and results), beside the output of ours each one is
    (None: a batch of requests we aborted only, which is no step of the simulator's).

    A pause for a weight update (the preempt fault, `faults.pause_and_retract`) processes
    the batch in flight first, so it waits for that batch's tokens: the next schedule()
    runs nothing (the loop then hands the tokens over), and the pause, SGLang's own, pops
    and processes the batch (through `process`) before it retracts every request."""

    def __init__(self, scheduler: Any, process: Process) -> None:
        self.scheduler = scheduler
        self.outputs: deque[SchedulerOutput | None] = deque()
        self.pause_pending = False
        scheduler.process_batch_result = process  # what SGLang's pause calls on the batch

    def __len__(self) -> int:
        return len(self.outputs)

    def step(self, batch: ScheduleBatch | None, output: SchedulerOutput | None) -> None:
        """One turn of event_loop_overlap: launch the batch, then process the last one if
        it is no step of the simulator's (which hands its own over: `complete`)."""
        s = self.scheduler
        num_queued = len(self.outputs)
        if batch is not None:
            self._launch(batch, output)
        if num_queued and self.outputs[0] is None:
            self._tokens_of_no_one()
            s.process_batch_result(*s.result_queue.popleft())
        s.last_batch = batch

    def _tokens_of_no_one(self) -> None:
        """The oldest batch is one of requests we aborted only: its tokens are discarded."""
        output = self.outputs.popleft()
        assert output is None, "a step of the simulator's: its tokens come at complete()"
        batch, result = self.scheduler.result_queue[0]
        result.next_token_ids = torch.zeros(len(batch.reqs), dtype=torch.int64)

    def _launch(self, batch: ScheduleBatch, output: SchedulerOutput | None) -> None:
        """`Scheduler.run_batch` under overlap, as its CPU side leaves the scheduler: the
        forward counters, and the batch's copy queued with a result still to come."""
        s = self.scheduler
        assert not s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch), (
            "SGLang would process the last batch before this one (not modelled)"
        )
        assert len(s.result_queue) == len(self.outputs) <= 1, "one batch in flight at most"
        s.forward_ct += 1
        batch.forward_iter = s.forward_ct
        s.result_queue.append((batch.copy(), GenerationBatchResult(next_token_ids=None)))
        self.outputs.append(output)

    def oldest(self) -> ScheduleBatch:
        assert self.outputs, "no batch in flight"
        return self.scheduler.result_queue[0][0]

    def complete(self, output: SchedulerOutput, tokens: list[int]) -> bool:
        """The oldest batch's result, now with `tokens` (batch order), processed; or, with a
        pause pending, the pause (True), which processes it."""
        s = self.scheduler
        assert self.outputs and self.outputs[0] is output, "not the oldest batch in flight"
        self.outputs.popleft()
        s.result_queue[0][1].next_token_ids = torch.tensor(tokens, dtype=torch.int64)
        if self.pause_pending:
            self.pause_pending = False
            faults.pause_and_retract(s)
            return True
        s.process_batch_result(*s.result_queue.popleft())
        if not self.outputs:  # what SGLang's idle turn leaves: nothing launched after it
            s.last_batch = None
        return False

    def pause(self) -> str:
        """SGLang's pause for a weight update (`faults.pause_and_retract`), which processes
        the batch in flight first: at once if that batch is no step of the simulator's
        (its tokens are no one's), else once the loop hands its tokens over (`complete`)."""
        if self.outputs and self.outputs[0] is not None:
            self.pause_pending = True
            return "pause_generation(retract) once the batch in flight is processed"
        if self.outputs:
            self._tokens_of_no_one()
        return faults.pause_and_retract(self.scheduler)

    def sampling(self) -> set[str]:
        """Our ids that a batch in flight samples a token for."""
        return {
            r.request_id
            for output in self.outputs  # bounded: one batch in flight
            if output is not None
            for r in output.scheduled
            if r.samples
        }
