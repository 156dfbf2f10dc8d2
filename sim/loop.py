"""The engine loop: a trace through an engine under test on a SimPy clock, checked every step.

One step, as a serving engine runs it::

    drain inbox (arrivals, aborts) -> schedule() -> runner metadata -> executor
        -> clock += step cost -> update_from_output() -> invariants

Safety phase: every step is checked (sim/step_checks.py: token accounting, the shadow-KV
reads of the executor, the block pool, outputs of finished requests). Liveness phase
(sim/liveness.py): once nothing more will arrive, every request must finish within a bound
derived from the work left, else the run fails with the stuck requests and reasons (exit 3).

The loop owns the SimPy process, the step and its numbering; its parts own the rest: the
ledger, the intake, the checks, liveness, the steps in flight under async scheduling
(sim/pipelined.py), drafts (sim/speculation.py), the executor's parts (sim/executors.py).
A synchronous step and a pipelined one execute alike, but for when the engine learns it.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Mapping
from typing import Any

import simpy

from schedcheck.engines.capabilities import EngineRefusal
from schedcheck.engines.protocol import EngineConfig, FinishedRequest, KVSnapshot, SchedulerOutput
from schedcheck.engines.reference.mutants import apply_runner_mutant
from schedcheck.engines.registry import capabilities
from schedcheck.engines.runner_metadata import DISAGREES, step_metadata
from schedcheck.engines.schedule_io import Fingerprint
from schedcheck.invariants.pool_delta import PoolDeltaChecker
from schedcheck.invariants.protocol import check_not_lost
from schedcheck.invariants.violation import Violation
from schedcheck.sim.arrivals import Arrivals
from schedcheck.sim.blame import HARNESS_CRASH, build_engine, harness_crash
from schedcheck.sim.cost_model import StepCostModel, profile
from schedcheck.sim.coverage import Coverage, RarePathCounter
from schedcheck.sim.executors import make_executor
from schedcheck.sim.faults import FaultInjectable, FaultInjector
from schedcheck.sim.intake import Intake
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.liveness import Liveness
from schedcheck.sim.meets import meets
from schedcheck.sim.pipelined import Executed, Pipeline, Process, pipeline_depth
from schedcheck.sim.result import (  # re-exported: the loop's API
    EXIT_CLEAN,
    EXIT_LIVENESS,
    EXIT_USAGE,
    EXIT_VIOLATION,
    EngineCrash,
    RunResult,
    SimOptions,
    call_engine,
)
from schedcheck.sim.run_rng import RunRng
from schedcheck.sim.speculation import Drafts, make_speculation
from schedcheck.sim.step_checks import StepChecks
from schedcheck.traces.errors import TraceError
from schedcheck.traces.schema import TraceRequest

__all__ = ["EXIT_CLEAN", "EXIT_LIVENESS", "EXIT_USAGE", "EXIT_VIOLATION", "HARNESS_CRASH",
           "EngineCrash", "RunResult", "SimOptions", "Simulation", "pipeline_depth",
           "run"]  # fmt: skip
SIMPY_OUT_OF_EVENTS = "No scheduled events left"  # env.run(until=...) with nothing to run


def run(
    trace: Iterable[TraceRequest],
    engine: str = "reference",
    config: EngineConfig | None = None,
    options: SimOptions | None = None,
    cost: StepCostModel | None = None,
) -> RunResult:
    """Replay `trace` through engine `engine` (a name or `package.module:factory`)."""
    config, options = config or EngineConfig(), options or SimOptions()
    return Simulation(trace, engine, config, options, cost or profile("llama3-8b-h100")).run()


class Simulation:
    def __init__(
        self,
        trace: Iterable[TraceRequest],
        engine: str,
        config: EngineConfig,
        options: SimOptions,
        cost: StepCostModel,
    ) -> None:
        self.config, self.options, self.cost = config, options, cost
        self.result = result = RunResult(engine, config, options, cost)
        self.env = simpy.Environment()
        self.engine = build_engine(engine, config)
        self.executor = make_executor(options, config)
        self.wakeup = self.env.event()
        self.arrivals = arrivals = Arrivals(self.env, trace, self._wake, options.vocab_size)
        self.ledger = Ledger(options.context_steps, result, arrivals.finished, arrivals.full_prompt)
        budget = capabilities(engine).decodes_within_budget
        self.checks = StepChecks(
            config, options, result, self.ledger, self.executor, self._snapshot, budget
        )
        self.liveness = Liveness(
            config, options, self.ledger, self.arrivals, self._waiting_reasons, result
        )
        self.fingerprint = Fingerprint()  # of the steps recorded (an empty step is not)
        self.step_index = 0  # the step this turn schedules: schedule() calls before it
        self.done = False
        self.progress = _progress(options.progress)
        self.rng = RunRng(options.seed)  # the run's one generator (faults, drafts)
        self.coverage = Coverage(config.block_size, config.num_lookahead_tokens)
        self.kv_groups = config.kv_cache_groups
        parts = (self.engine, self.executor, self.rng, self.checks.accounting, self.coverage)
        self.spec = make_speculation(config, options, *parts)
        depth = pipeline_depth(engine, self.engine, config)  # 2: async scheduling
        self.pipeline = Pipeline(depth, self.ledger, self.coverage, self.spec, self.executor)
        self._wire_intake()

    def _wire_intake(self) -> None:
        """Who is told of a request's arrival and leaving, in order: the executor first."""
        spec = self.spec
        self.ledger.forget += [
            self.executor.run.finish_request,
            *([spec.forget] if spec is not None else []),
            self.checks.forget,
            self.coverage.forget,
        ]
        injectable = self.engine if meets(self.engine, FaultInjectable) else None
        faults = FaultInjector(self.options.faults, self.rng, injectable, call_engine)
        parts = (self.arrivals, self.ledger, self.engine, self.executor, spec, self.coverage)
        self.intake = Intake(*parts, faults, lambda: float(self.env.now))

    @property
    def pool(self) -> PoolDeltaChecker:
        """The block-pool checker (benchmarks and tests read its counts)."""
        return self.checks.pool

    # -- the SimPy process ------------------------------------------------------------------

    def run(self) -> RunResult:
        started = time.perf_counter()
        proc = self.env.process(self._engine_process())
        try:
            self.env.run(until=proc)
        except (TraceError, EngineRefusal):
            raise  # bad input: the command line says so (exit 2)
        except Exception as exc:  # raised in the arrivals process: a harness crash too
            if str(exc).startswith(SIMPY_OUT_OF_EVENTS):
                self.liveness.out_of_events()
                self.done = True
            else:
                self._fatal([harness_crash(self.step_index, exc)])
        finally:
            if self.progress is not None:
                self.progress.close()
        return self._filled_result(time.perf_counter() - started)

    def _filled_result(self, wall_time_s: float) -> RunResult:
        res = self.result
        res.wall_time_s, res.sim_time_s = wall_time_s, float(self.env.now)
        res.fingerprint = self.fingerprint.hexdigest()
        res.steps = self.fingerprint.num_steps
        res.trace = list(self.arrivals.requests.values())
        for rid in self.ledger.live:  # unfinished (a violation or liveness stop): as sampled
            res.outputs.setdefault(rid, list(self.ledger.sampled.get(rid, ())))
        res.requests = len(self.arrivals.released)
        self.checks.fill(res)
        if meets(self.engine, RarePathCounter):
            self.coverage.observe_engine_paths(self.engine.rare_path_counts())
        res.coverage = dict(self.coverage.counts)
        return res

    def _wake(self) -> None:
        if not self.wakeup.triggered:
            self.wakeup.succeed()

    def _sleep(self) -> Process:
        if self.arrivals.inbox:  # released while the engine ran (a turn it continued already)
            return
        if self.wakeup.triggered:
            self.wakeup = self.env.event()
        yield self.wakeup

    def _engine_process(self) -> Process:
        while not self.done:  # bounded: steps_max, and the stall and liveness bounds
            try:
                yield from self._turn()
            except EngineCrash as crash:
                self._fatal([crash.violation(self.step_index)])
            except Exception as exc:  # the harness itself raised: a finding, with its bundle
                self._fatal([harness_crash(self.step_index, exc)])

    def _unfinished(self) -> bool:  # an engine call: what it raises is blamed by its frames
        return call_engine("has_unfinished_requests", self.engine.has_unfinished_requests)

    def _turn(self) -> Process:
        """Take what arrived, then run one step (or apply one in flight, or wait)."""
        self.intake.drain()
        if self.arrivals.done and not self.liveness.started:
            self.liveness.start(self.step_index)
        if not self._unfinished():
            yield from self._idle()
            return
        if self._liveness_exceeded():
            return
        if self.options.faults and self.liveness.faults_on(self.step_index):
            self.intake.inject_faults(self.step_index, self.result.faults_fired)
            if not self._unfinished():
                return
        output = call_engine("schedule", self.engine.schedule)
        yield from self._run_step(output)
        self.step_index += 1

    def _run_step(self, output: SchedulerOutput) -> Process:
        malformed = self.checks.check_output(output)
        if malformed:  # nothing is derived from an output the protocol refuses
            self._fatal(malformed)
            return
        self.violate(self.pipeline.drop(output))  # async: samples in flight it drops
        if not output.scheduled:
            yield from self._empty_step(output)
            return
        self.liveness.empty_steps = 0
        if self.pipeline.depth == 1:
            yield from self._step(output)
        else:
            yield from self.pipeline.step(self, output)

    def _idle(self) -> Process:
        """The engine has nothing unfinished: apply a step still in flight (async), or
        check that no request was lost, then end the run or wait for arrivals."""
        if self.pipeline:
            self.pipeline.complete_oldest(self)  # async: its output is still to be applied
            return
        missing = check_not_lost(self.step_index, *self.liveness.lost())
        if missing:  # the engine dropped a request without reporting it
            self._fatal(missing)
        elif self.arrivals.done and not self.arrivals.inbox:
            self._finish_run()
        else:
            self.violate(self.checks.idle(self.step_index, self._snapshot))
            yield from self._sleep()

    # -- one step ---------------------------------------------------------------------------

    def execute(self, output: SchedulerOutput) -> Generator[simpy.Event, Any, Executed]:
        """Check, run and record the step as the runner runs it; the clock moves by its cost.
        Its violations are not reported yet: the caller does, before the engine's update."""
        violations = self.checks.before_execute(output)
        self.ledger.retire(output.finished_req_ids, "finished")
        self.ledger.retire(output.rejected_req_ids, "rejected")
        cfg = self.config
        meta, disagree = step_metadata(  # the engine's own runner's metadata, if it hands it
            self.engine,
            output,
            cfg.block_size,
            num_lookahead_tokens=cfg.num_lookahead_tokens,
            max_model_len=cfg.max_model_len,
            kv_groups=self.kv_groups,
        )
        violations += [Violation(DISAGREES, output.step, w, request_id=r) for r, w in disagree]
        meta = apply_runner_mutant(meta, cfg.mutant)
        sampled = self.executor.run.execute(meta)
        verifier = self.executor.drafts
        accepted = verifier.accepted_token_ids if verifier is not None else {}
        violations += self.checks.after_execute(meta)
        self._record(output)
        self.coverage.observe_step(output, self.ledger.live)
        yield self.env.timeout(self.cost.step_time_us(meta) * 1e-6)
        return Executed(sampled, accepted, self.result.unignored(violations))

    def _step(self, output: SchedulerOutput) -> Process:
        """A synchronous step: executed, then applied to the engine at once."""
        step = yield from self.execute(output)
        if step.violations and not self.options.keep_going:  # before the engine sees it
            self.violate(step.violations)
            return
        finished = self._update_engine(output, step.sampled, step.accepted)
        spec = self.spec
        if spec is not None:
            spec.roll_back_rejected(output, step.accepted, self.ledger.live)
        gained = self.ledger.gain_all(step.sampled, step.accepted, spec is not None)
        if spec is not None:
            for rid, kept in gained.items():  # bounded: the step's samples
                spec.gained(rid, kept)
        self._applied(output, finished, step.violations)
        if spec is not None and not self.done:
            spec.hand_to_engine(spec.propose(step.sampled, self.ledger.live))

    def apply(self, output: SchedulerOutput, sampled: dict[str, int], accepted: Drafts) -> None:
        """Async: a step the runner executed (and learnt from) one step ago, to the engine."""
        finished = self._update_engine(output, sampled, accepted)
        self._applied(output, finished, [])

    def _update_engine(
        self, output: SchedulerOutput, sampled: dict[str, int], accepted: Drafts
    ) -> list[FinishedRequest]:
        """The engine's update_from_output; an engine with drafts also gets the accepted."""
        if self.spec is not None:
            return self.spec.update_engine(output, sampled, accepted)
        return call_engine("update_from_output", self.engine.update_from_output, output, sampled)

    def _applied(
        self, output: SchedulerOutput, finished: list[FinishedRequest], found: list[Violation]
    ) -> None:
        """The engine applied `output`: check it, report, retire what finished."""
        unapplied = self.pipeline.unapplied_rejections()
        found = found + self.checks.after_update(output, finished, unapplied, self.step_index)
        self.violate(found)
        self.coverage.observe_finished(finished)
        for f in finished:
            self.ledger.retire((f.request_id,), "finished", f.output_token_ids)

    def _empty_step(self, output: SchedulerOutput) -> Process:
        """A step that runs nothing may still preempt, finish or reject requests."""
        self.ledger.retire(output.finished_req_ids, "finished")
        self.ledger.retire(output.rejected_req_ids, "rejected")
        self.violate(self.checks.empty_step(self.pipeline.as_run(output)))  # async: discarded
        if output.preempted_req_ids:
            self.coverage.observe_step(output, self.ledger.live)
        if output.rejected_req_ids or output.finished_req_ids or output.preempted_req_ids:
            self._record(output)
            self.liveness.empty_steps = 0
        else:
            self.liveness.empty_steps += 1
        if self.pipeline and not self.done:  # async: step N+1 was empty
            self.pipeline.complete_oldest(self)
            self.liveness.empty_steps = 0
        if not self.done:
            yield from self._sleep_or_stall()

    def _sleep_or_stall(self) -> Process:
        """After a step that ran nothing: retry at once after progress, else wait or fail."""
        if self.liveness.empty_steps == 0 or not self._unfinished():
            return
        if self.liveness.stalled:
            self._stuck("the engine schedules nothing while requests wait")
            return
        if not (self.arrivals.idle and not self.arrivals.inbox):
            yield from self._sleep()  # else retry at once (a one-step fault may have passed)

    def _record(self, output: SchedulerOutput) -> None:
        self.fingerprint.update(output)
        if self.options.record_schedule:
            self.result.schedule.append(output)
        self.ledger.remember(output)
        steps = self.fingerprint.num_steps
        if self.progress is not None and steps % 64 == 0:
            res = self.result
            self.progress.n = res.finished + res.aborted + res.rejected
            self.progress.set_postfix(sim_s=f"{self.env.now:.0f}", steps=steps)
        if steps >= self.options.steps_max:
            self._stuck(f"steps_max {self.options.steps_max} reached")

    def _snapshot(self) -> KVSnapshot:
        return call_engine("kv_snapshot", self.engine.kv_snapshot)

    def _waiting_reasons(self) -> Mapping[str, str]:
        return call_engine("waiting_reasons", self.engine.waiting_reasons)

    # -- violations and the end -------------------------------------------------------------

    def violate(self, violations: list[Violation]) -> None:
        """Report the violations not ignored; one ends the run unless keep_going."""
        now = float(self.env.now)
        if self.result.report(violations, now, self.ledger.context) and not self.options.keep_going:
            self.done = True

    def _fatal(self, violations: list[Violation]) -> None:
        """Violations after which the run cannot go on (ignored ones end it too)."""
        self.violate(violations)
        self.done = True

    def _liveness_exceeded(self) -> bool:
        why = self.liveness.exceeded(self.step_index)
        if why is not None:
            self._stuck(why)
        return why is not None

    def _stuck(self, why: str) -> None:
        self.liveness.stuck(why)
        self.done = True

    def _finish_run(self) -> None:
        self.done = True
        self.coverage.observe_snapshot(snapshot := self._snapshot())
        self.violate(self.checks.at_end(self.step_index, snapshot))


def _progress(enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(desc="replay", unit="req", leave=False, dynamic_ncols=True)
