"""The steps in flight under async scheduling: executed by the runner, not yet applied to
the engine (vLLM's AsyncScheduler with EngineCore.step_with_batch_queue).

Step N+1 is scheduled while step N's output has not reached the engine::

    schedule(N)  execute(N)  schedule(N+1)  execute(N+1)  update(N)  schedule(N+2) ...

The runner knows what the engine does not yet: N's samples, the drafts it accepted and
rejected, its drafter's proposals for N+1. It runs N+1 as it would (sim/async_runner.py
fills the placeholders in and moves chunks back by N's rejected drafts), and the loop's
ledger learns N's tokens at once; the engine learns them at update(N), one step later.
Every check follows that order: N+1's accounting and shadow-KV reads run against what the
runner knows; the outputs and the block pool are checked after update(N).

An engine may drop what a step in flight sampled for a request (vLLM: a cache reset that
preempts the running requests between two steps). N+1's output then names it in
`dropped_req_ids`; the runner forgets those samples (`drop`: the ledger and the executor),
samples the positions again, and N's update still reaches the engine, which discards them.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Generator
from typing import Any, NamedTuple, Protocol, runtime_checkable

import simpy

from schedcheck.engines.protocol import (
    EngineConfig,
    ScheduledRequest,
    SchedulerOutput,
    is_async_scheduling,
)
from schedcheck.invariants.violation import Violation
from schedcheck.sim.async_runner import InFlight, as_run, has_placeholder
from schedcheck.sim.coverage import Coverage
from schedcheck.sim.executors import ExecutorParts, SampleRollback
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.meets import meets
from schedcheck.sim.speculation import Drafts, Speculation

Process = Generator[simpy.Event, Any, None]


class Executed(NamedTuple):
    """A step the runner executed: its samples, accepted drafts, violations so far."""

    sampled: dict[str, int]
    accepted: Drafts
    violations: list[Violation]


class StepHost(Protocol):
    """The loop, as a pipelined step needs it (sim/loop.py)."""

    done: bool

    def execute(self, output: SchedulerOutput) -> Generator[simpy.Event, Any, Executed]:
        """Check, run and record the step; the clock moves by its cost."""
        ...

    def violate(self, violations: list[Violation]) -> None: ...

    def apply(self, output: SchedulerOutput, sampled: dict[str, int], accepted: Drafts) -> None:
        """The engine's update_from_output of a step, then its checks."""
        ...


@runtime_checkable
class AsyncSchedulingEngine(Protocol):
    supports_async_scheduling: bool  # vLLM's AsyncScheduler, SGLang's overlap scheduling


def pipeline_depth(name: str, engine: object, config: EngineConfig) -> int:
    """Steps in flight: 1, or 2 under async scheduling, for an engine that models it (a
    ValueError otherwise: the CLI's exit 2)."""
    if not is_async_scheduling(config):
        return 1
    if not (meets(engine, AsyncSchedulingEngine) and engine.supports_async_scheduling):
        raise ValueError(
            f"engine {name!r} does not model async scheduling (--async-scheduling): "
            "use --engine vllm-v1, sglang (overlap scheduling) or reference"
        )
    return 2


class Pipeline:
    def __init__(
        self,
        depth: int,
        ledger: Ledger,
        coverage: Coverage,
        spec: Speculation | None,
        executor: ExecutorParts,
    ) -> None:
        self.depth, self.ledger, self.coverage, self.spec = depth, ledger, coverage, spec
        self.executor = executor
        self.in_flight: deque[InFlight] = deque()  # oldest first
        self.runner_drafts: Drafts = {}  # the runner's drafter's, for the next step

    def __bool__(self) -> bool:
        return bool(self.in_flight)

    def step(self, host: StepHost, output: SchedulerOutput) -> Process:
        """Step N+1, scheduled before update(N): run as the runner knows it; its violations
        are reported before the engine sees it; then update(N)."""
        run = self.as_run(output)
        executed = yield from host.execute(run)
        accepted = executed.accepted if self.spec is not None else {}
        self.runner_knows(run, executed.sampled, accepted)
        host.violate(executed.violations)
        if host.done:
            return
        self.push(output, run, executed.sampled, accepted)
        while len(self.in_flight) >= self.depth and not host.done:  # bounded: the depth
            self.complete_oldest(host)

    def complete_oldest(self, host: StepHost) -> None:
        """Apply the oldest executed step's output (the engine's own) to the engine."""
        output, sampled, accepted, _ = self.in_flight.popleft()
        host.apply(output, sampled, accepted)

    def drop(self, output: SchedulerOutput) -> list[Violation]:
        """The engine drops the tokens sampled in the steps in flight for the requests of
        `output.dropped_req_ids` (a reset preempted them between two steps): the runner
        forgets them too, newest first, and samples those positions again; their steps
        still reach the engine's update, which discards them. A request named with no
        sample in flight is the engine's protocol error (`protocol.dropped`)."""
        request_ids = output.dropped_req_ids
        if not request_ids:
            return []
        run = self.executor.run
        if not meets(run, SampleRollback):
            raise TypeError(f"{type(run).__name__} cannot forget samples (dropped_req_ids)")
        found: set[str] = set()
        for entry in reversed(self.in_flight):  # bounded: the pipeline depth
            for rid in request_ids:  # bounded: the output's preempted
                token = entry.sampled.get(rid)
                if token is None:
                    continue
                assert not entry.accepted.get(rid) and rid not in entry.rejected, (
                    f"{rid}: a step in flight with drafts is dropped"
                )
                self.ledger.unsample(rid, (token,))
                run.unsample(rid, (token,))
                found.add(rid)
        message = "dropped_req_ids names it, but no sample of it is in flight"
        lost = sorted(set(request_ids) - found)
        return [Violation("protocol.dropped", output.step, message, request_id=r) for r in lost]

    def as_run(self, output: SchedulerOutput) -> SchedulerOutput:
        """The step as the runner runs it (sim/async_runner.py). A discarded chunk (a
        request the simulator retired, which the engine runs once more) reads its token in
        flight too: the runner fills it in from what it sampled for the request."""
        rejected = self.unapplied_rejections()
        discarded = output.discarded
        if any(has_placeholder(r) for r in discarded):
            outputs = self.ledger.result.outputs
            discarded = tuple(
                as_run(r, outputs.get(r.request_id, ()), 0, ()) if has_placeholder(r) else r
                for r in discarded
            )
            output = dataclasses.replace(output, discarded=discarded)
        if not rejected and not any(has_placeholder(r) for r in output.scheduled):
            return output
        scheduled = tuple(
            self._as_run(r, rejected.get(r.request_id, 0))
            if has_placeholder(r) or r.request_id in rejected
            else r
            for r in output.scheduled
        )
        return dataclasses.replace(output, scheduled=scheduled)

    def runner_knows(
        self, output: SchedulerOutput, sampled: dict[str, int], accepted: Drafts
    ) -> None:
        """What the runner knows after executing a step, before the engine does: every
        token it sampled (accepted drafts too, even past max_tokens: the engine drops those
        at its update), the drafts it rejected (the accounting rolls back now) and its
        drafter's proposals for the next step."""
        live, spec = self.ledger.live, self.spec
        if spec is not None:
            spec.roll_back_rejected(output, accepted, live)
        for rid, token in sampled.items():
            gained = (*accepted.get(rid, ()), token)
            self.ledger.sampled_by_runner(rid, gained)
            if spec is not None and rid in live:
                spec.gained(rid, gained)
        if spec is not None:
            self.runner_drafts = spec.propose(sampled, live)

    def push(
        self,
        engine_output: SchedulerOutput,
        run: SchedulerOutput,
        sampled: dict[str, int],
        accepted: Drafts,
    ) -> None:
        """A step executed: the engine's own output (placeholders and all), and the step
        as run, whose drafts the runner rejected stay unapplied until it is popped."""
        rejected = {
            r.request_id: r.num_draft_tokens - len(accepted.get(r.request_id, ()))
            for r in run.scheduled
            if r.spec_token_ids
        }
        self.in_flight.append(InFlight(engine_output, sampled, accepted, rejected))

    def unapplied_rejections(self) -> dict[str, int]:
        """Drafts rejected in the steps executed and not yet applied to the engine."""
        out: dict[str, int] = {}
        for entry in self.in_flight:  # bounded: the pipeline depth
            for rid, n in entry.rejected.items():
                out[rid] = out.get(rid, 0) + n
        return out

    def _as_run(self, r: ScheduledRequest, num_rejected: int) -> ScheduledRequest:
        self.coverage.counts["async-output-placeholder"] += 1
        rid = r.request_id
        outputs = self.ledger.sampled.get(rid, []) if rid in self.ledger.live else []
        return as_run(r, outputs, num_rejected, self.runner_drafts.get(rid, ()))
