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
`req.is_retracted`), aborted ones that run once more.

A decode whose last token is still in flight reads it through SGLang's future map; the
adapter puts PLACEHOLDER_TOKEN_ID there and the simulator's runner fills it in. A request
retracted while it has a token in flight loses that token: it is named in the output's
`dropped_req_ids`, and the runner samples the position again when it runs once more.

Not driven: `SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP` and grammar sync (both process N
before launching N+1; off in a default server, asserted off here).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult

from schedcheck.engines.protocol import SchedulerOutput


class LaunchQueue:
    """The batches launched and not processed yet, oldest first: SGLang's own
    `result_queue` (its batch copies and results), beside the output of ours each one is
    (None: a batch of requests we aborted only, which is no step of the simulator's)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.outputs: deque[SchedulerOutput | None] = deque()

    def __len__(self) -> int:
        return len(self.outputs)

    def launch(self, batch: ScheduleBatch, output: SchedulerOutput | None) -> None:
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

    def ours_first(self) -> bool:
        """True if the oldest queued batch is a step of the simulator's (it processes that
        one at update_from_output; the adapter processes the others itself)."""
        return self.outputs[0] is not None

    def pop(
        self, output: SchedulerOutput | None, tokens: list[int]
    ) -> tuple[ScheduleBatch, GenerationBatchResult]:
        """The oldest batch's copy and its result, which now holds `tokens` (batch order)."""
        assert self.outputs and self.outputs[0] is output, "not the oldest batch in flight"
        self.outputs.popleft()
        batch, result = self.scheduler.result_queue.popleft()
        result.next_token_ids = torch.tensor(tokens, dtype=torch.int64)
        return batch, result

    def sampling(self) -> set[str]:
        """Our ids that a batch in flight samples a token for."""
        return {
            r.request_id
            for output in self.outputs  # bounded: one batch in flight
            if output is not None
            for r in output.scheduled
            if r.samples
        }
