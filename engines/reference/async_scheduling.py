"""Async scheduling in the reference engine, as vLLM's AsyncScheduler does it.

The loop schedules step N+1 before it applies step N's output (pipeline depth 2). So, as
vLLM does, `schedule()` advances each scheduled request at once: num_computed_tokens moves
to the chunk's end and a request whose chunk samples gets a placeholder (-1) where its
token will be. The next schedule() then runs that placeholder as the next decode's token
(the runner fills it in). `update_from_output(N)` puts the sampled token in place, caches
the blocks step N wrote, and finishes a request at max_tokens::

    after schedule(N)      | computed ........... | chunk N | p |        p: N's sample
                           0                 num_computed_tokens (advanced: end of N)
    schedule(N+1)          runs p at end of N (a decode of 1 token)
    update(N)              p := the sampled token; blocks of [0, end of N) cached

Preemption while a step is in flight (in schedule(N+1), or a fault between steps): that
step's tokens are stale (`num_stale_tokens`): its update caches nothing (the blocks were
freed) but still delivers its sample (vLLM 0.33 keeps stale outputs unless the KV is to be
transferred); the request is not re-admitted while one of its samples is still a
placeholder. A request whose outputs, placeholders included, reach max_tokens is not
scheduled again; it finishes at the update that fills its last placeholder. One that
samples its EOS finishes at that update; a step of it still in flight (scheduled before
the EOS was known) is dropped with its placeholder, as vLLM drops it.

The KV manager counts what was applied; vLLM's Request counts what was scheduled. After an
update (where the simulator reads it) the snapshot reports the second: the manager's count
plus the request's tokens still in flight, as the invariants compare it with vLLM.

Not modelled: drafts together with async scheduling (vLLM schedules them optimistically;
refused in engine.py), and a manager that counts fewer computed tokens than ran (a radix
mutant's disagreement is not carried over to the in-flight step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from schedcheck.engines.protocol import FinishedRequest, KVSnapshot, SchedulerOutput
from schedcheck.engines.reference.request import Request, RequestStatus
from schedcheck.engines.reference.scheduler import Scheduler

_RUNNING = RequestStatus.RUNNING


class AsyncScheduling(Scheduler):
    """Mixed in before a Scheduler class (the clean one or a mutant's): `async_of`."""

    def schedule(self) -> SchedulerOutput:
        output = super().schedule()
        scheduled = []
        for r in output.scheduled:  # bounded: the step's requests
            request = self.requests[r.request_id]
            request.num_computed_tokens = r.num_end_tokens  # vLLM: _update_after_schedule
            request.num_in_flight_tokens += r.num_scheduled_tokens
            if r.samples:
                request.append_placeholder()
            tokens = r.token_ids.copy()  # a placeholder view would change when filled
            tokens.flags.writeable = False
            scheduled.append(dataclasses.replace(r, token_ids=tokens))
        return dataclasses.replace(output, scheduled=tuple(scheduled))

    def _chunk_running(self, request: Request, token_budget: int) -> int:
        if request.num_output_tokens >= request.max_tokens:  # its last sample is in flight
            return 0
        return super()._chunk_running(request, token_budget)

    def _admit(self, request: Request, token_budget: int, batch: Any) -> int:
        if request.num_output_placeholders:
            self._blocked(request, "a sample of a step in flight is not applied yet")
            return 0
        return super()._admit(request, token_budget, batch)

    def _preempt(self, request: Request) -> None:
        super()._preempt(request)
        request.num_stale_tokens = request.num_in_flight_tokens

    def update_from_output(
        self,
        output: SchedulerOutput,
        sampled_token_ids: Mapping[str, int],
        accepted_token_ids: Mapping[str, tuple[int, ...]] | None = None,
    ) -> list[FinishedRequest]:
        assert not accepted_token_ids, "drafts with async scheduling are not modelled"
        finished = self._pending_finished
        self._pending_finished = []
        for scheduled in output.scheduled:  # bounded: the step's requests
            request = self.requests.get(scheduled.request_id)
            if request is None:
                continue  # aborted, or finished, after this step was scheduled
            stale = self._apply_tokens(request, scheduled.num_scheduled_tokens)
            if not stale:
                self.kv_manager.cache_blocks(request, scheduled.num_end_tokens)
            if not scheduled.samples:
                continue
            token_id = sampled_token_ids.get(scheduled.request_id)
            if token_id is None:
                raise ValueError(
                    f"step {output.step}: request {scheduled.request_id!r} samples this step "
                    "but sampled_token_ids has no token for it"
                )
            request.fill_placeholder(scheduled.num_end_tokens, int(token_id))
            num_outputs = request.num_output_tokens - request.num_output_placeholders
            if num_outputs >= request.max_tokens or token_id == request.eos_token_id:
                finished.append(self._finish_async(request))
        return finished

    def _apply_tokens(self, request: Request, num_tokens: int) -> bool:
        """The step's tokens leave the in-flight count; True if they were stale."""
        request.num_in_flight_tokens -= num_tokens
        assert request.num_in_flight_tokens >= 0
        stale = min(request.num_stale_tokens, num_tokens)
        request.num_stale_tokens -= stale
        assert stale in (0, num_tokens), "a step is stale whole or not at all"
        return stale > 0

    def _finish_async(self, request: Request) -> FinishedRequest:
        if request.status is _RUNNING:
            self.running.remove(request)
        else:  # preempted while its last sample was in flight
            self.waiting.remove(request)
        return self._finish_stopped(request)

    def kv_snapshot_of(self, snapshot: KVSnapshot) -> KVSnapshot:
        return _InFlightSnapshot(snapshot, self.requests)


def async_of(scheduler_cls: type[Scheduler]) -> type[Scheduler]:
    """`scheduler_cls` with async scheduling (the clean Scheduler or a mutant's)."""
    return type(f"Async{scheduler_cls.__name__}", (AsyncScheduling, scheduler_cls), {})


class _InFlightSnapshot:
    """The manager's snapshot, with num_computed_tokens counting the tokens in flight."""

    def __init__(self, snapshot: KVSnapshot, requests: Mapping[str, Request]) -> None:
        self._snapshot = snapshot
        self._requests = requests

    def __getattr__(self, name: str) -> Any:
        return getattr(self._snapshot, name)

    def num_computed_tokens(self) -> Mapping[str, int]:
        out = dict(self._snapshot.num_computed_tokens())
        for rid in out:  # bounded: the requests holding blocks
            request = self._requests.get(rid)
            if request is not None:
                out[rid] += request.num_in_flight_tokens - request.num_stale_tokens
        return out
