"""Liveness: once nothing more arrives, every request finishes within a bound, or the run
fails naming the stuck requests and why each waits (exit 3).

The safety phase checks every step; it ends when the arrivals are done. With faults, they
go on for FAULT_STEPS_AFTER_ARRIVALS more steps after the arrivals went idle (the last one
is in; later turns may still wait for their parents), then stop for good: the liveness
phase is fault-free, so a request stuck there is stuck by the engine, not by a fault::

    arrivals ... last arrival | faults go on (64 steps) | liveness: deadline = start + bound
                              ^ arrivals idle            ^ fault window ends

The bound is the work left, done one request at a time, doubled, plus a margin: a request
runs at most min(token budget, long_prefill_token_threshold, vLLM's
max_num_scheduled_tokens) tokens a step, its prefill steps may come once every
vllm:prefill_schedule_interval steps, and each of its outputs takes a step.

In either phase the run is stuck when the engine schedules nothing for more than
stall_steps_max steps in a row while requests wait, and when `steps_max` is reached. A
stuck run reports every live request with the engine's reason for it (waiting_reasons).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.arrivals import Arrivals
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.result import RunResult, SimOptions
from schedcheck.traces.schema import TraceRequest

FAULT_STEPS_AFTER_ARRIVALS = 64  # faults go on this long after the last arrival
OUT_OF_EVENTS = "nothing left to run (SimPy out of events)"


class Liveness:
    def __init__(
        self,
        config: EngineConfig,
        options: SimOptions,
        ledger: Ledger,
        arrivals: Arrivals,
        waiting_reasons: Callable[[], Mapping[str, str]],
        result: RunResult,
    ) -> None:
        self.config, self.options, self.ledger, self.arrivals = config, options, ledger, arrivals
        self.waiting_reasons, self.result = waiting_reasons, result
        self.deadline_step: int | None = None  # set when the liveness phase starts
        self.idle_since_step: int | None = None  # the arrivals idle since, in a row
        self.faults_over = False  # the fault window closed: no fault for the rest of the run
        self.empty_steps = 0  # steps in a row that scheduled nothing and changed nothing

    @property
    def stalled(self) -> bool:
        return self.empty_steps > self.options.stall_steps_max

    @property
    def started(self) -> bool:
        return self.deadline_step is not None

    def start(self, step: int) -> None:
        """Nothing more arrives (called every step until the phase has started): after the
        fault window, if any, every request must finish within the bound of the work left."""
        if self.options.faults and not self.faults_over:
            return
        self.deadline_step = step + self.bound()

    def faults_on(self, step: int) -> bool:
        """Do faults fire before this step? Until FAULT_STEPS_AFTER_ARRIVALS steps after the
        arrivals went idle (only a finish can release more: the last arrival is in, later
        turns wait for their parents) and stayed idle; never again once that window closed.
        Faults that starve a parent turn (a reset every few steps of a long prefill) would
        otherwise keep its later turns, and so the liveness phase, from ever coming."""
        if self.faults_over:
            return False
        if not self.arrivals.idle:
            self.idle_since_step = None
            return True
        if self.idle_since_step is None:
            self.idle_since_step = step
        self.faults_over = step >= self.idle_since_step + FAULT_STEPS_AFTER_ARRIVALS
        return not self.faults_over

    def exceeded(self, step: int) -> str | None:
        """Why the run is stuck, once `step` reaches the deadline; else None."""
        deadline = self.deadline_step
        if deadline is None or step < deadline:
            return None
        return f"not finished {deadline} steps after the last arrival"

    def stuck(self, why: str) -> None:
        """The run cannot finish: each live request with the engine's reason (or `why`)."""
        reasons = self.waiting_reasons()
        self.result.stuck = {rid: reasons.get(rid, why) for rid in self.ledger.live}
        self.result.stuck.setdefault("*", why)

    def lost(self) -> tuple[list[str], dict[str, str]]:
        """The live requests, and each later turn waiting for a predecessor -> that one."""
        return lost(self.ledger.live, self.arrivals.waiting_on)

    def out_of_events(self) -> None:
        """SimPy has nothing left to run while the loop waits: what each request waits for
        (the loop's own checks should end a run before)."""
        self.result.stuck = out_of_events(*self.lost())

    def bound(self) -> int:
        """Steps to finish the live requests one at a time, doubled, plus a margin."""
        if self.options.liveness_steps_max:
            return self.options.liveness_steps_max
        tokens_per_step = self.config.max_num_batched_tokens
        threshold = self.config.long_prefill_token_threshold
        if 0 < threshold < tokens_per_step:
            tokens_per_step = threshold
        tokens_per_step, prefill_interval = engine_step_limits(self.config, tokens_per_step)
        ledger = self.ledger
        work = sum(
            prefill_interval * -(-(ledger.num_tokens[rid]) // tokens_per_step)
            + req.max_tokens
            - len(ledger.sampled[rid])
            for rid, req in ledger.live.items()
        )
        return 2 * work + 2 * len(ledger.live) + 1000


def engine_step_limits(config: EngineConfig, tokens_per_step: int) -> tuple[int, int]:
    """(tokens a request may run per step, steps per prefill step) under vLLM's scheduler
    options (EngineConfig.extra: vllm:max_num_scheduled_tokens caps the step's tokens;
    vllm:prefill_schedule_interval runs prefill once every N steps)."""
    scheduled_max = config.extra.get("vllm:max_num_scheduled_tokens", "none")
    if scheduled_max.lower() != "none":
        tokens_per_step = min(tokens_per_step, int(scheduled_max))
    return tokens_per_step, int(config.extra.get("vllm:prefill_schedule_interval", "1"))


def lost(
    live: Mapping[str, object], waiting_on: Mapping[str, Sequence[TraceRequest]]
) -> tuple[list[str], dict[str, str]]:
    """The live requests, and each later turn waiting for a predecessor -> that one."""
    waiting = {turn.request_id: parent for parent, turns in waiting_on.items() for turn in turns}
    return sorted(live), waiting


def out_of_events(live: list[str], waiting: Mapping[str, str]) -> dict[str, str]:
    """SimPy has nothing left to run while the loop waits: what each request waits for
    (the loop's own checks should end a run before)."""
    stuck = {rid: f"{OUT_OF_EVENTS}: live, never reported finished" for rid in live}
    stuck.update(
        {turn: f"{OUT_OF_EVENTS}: a later turn waiting for {p}" for turn, p in waiting.items()}
    )
    return {"*": OUT_OF_EVENTS, **stuck}
