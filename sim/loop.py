"""The engine loop: a trace through an engine under test on a SimPy clock, checked every step.

One step, as a serving engine runs it::

    drain inbox (arrivals, aborts) -> schedule() -> runner metadata -> executor
        -> clock += step cost -> update_from_output() -> invariants

Safety phase: every step is checked (token accounting, the shadow-KV reads of the
executor, the block pool, outputs of finished requests). Liveness phase: once nothing more
will arrive, every request must finish within a bound derived from the work left, else the
run fails with the stuck requests and the engine's reasons (exit 3).
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import traceback
from collections import deque
from collections.abc import Iterable

import numpy as np
import simpy

from schedcheck.engines.capabilities import EngineRefusal
from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    ScheduledRequest,
    SchedulerOutput,
    SpecDecodeEngine,
    is_async_scheduling,
)
from schedcheck.engines.reference.mutants import apply_runner_mutant
from schedcheck.engines.registry import make_engine
from schedcheck.engines.schedule_io import Fingerprint
from schedcheck.invariants import hash_model
from schedcheck.invariants.accounting import AccountingChecker
from schedcheck.invariants.block_pool import ExpectedContent, check_no_leak
from schedcheck.invariants.outputs import check_finished
from schedcheck.invariants.pool_delta import PoolDeltaChecker
from schedcheck.invariants.protocol import ProtocolChecker, check_not_lost
from schedcheck.invariants.violation import Violation
from schedcheck.sim.arrivals import Abort, Arrivals, Release
from schedcheck.sim.async_runner import InFlight, as_run, has_placeholder
from schedcheck.sim.cost_model import StepCostModel, profile
from schedcheck.sim.coverage import Coverage
from schedcheck.sim.drafter import Drafter
from schedcheck.sim.faults import draw_faults
from schedcheck.sim.hash_executor import HashModelExecutor
from schedcheck.sim.kv_events import KVEventRecorder
from schedcheck.sim.result import (  # re-exported: the loop's API
    EXIT_CLEAN,
    EXIT_LIVENESS,
    EXIT_USAGE,
    EXIT_VIOLATION,
    EngineCrash,
    RunResult,
    SimOptions,
)
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.traces.errors import TraceError
from schedcheck.traces.schema import TraceRequest

__all__ = ["EXIT_CLEAN", "EXIT_LIVENESS", "EXIT_USAGE", "EXIT_VIOLATION", "EngineCrash",
           "RunResult", "SimOptions", "Simulation", "run"]  # fmt: skip
TENSOR_EXECUTOR = "schedcheck.gpu.executor:make_executor"
SIMPY_OUT_OF_EVENTS = "No scheduled events left"  # env.run(until=...) with nothing to run
HARNESS_CRASH = "harness-crash"
FAULT_STEPS_AFTER_ARRIVALS = 64  # faults go on this long after the last arrival


def run(
    trace: Iterable[TraceRequest],
    engine: str = "reference",
    config: EngineConfig | None = None,
    options: SimOptions | None = None,
    cost: StepCostModel | None = None,
) -> RunResult:
    """Replay `trace` through engine `engine` (a name or `package.module:factory`)."""
    return Simulation(
        trace,
        engine,
        config or EngineConfig(),
        options or SimOptions(),
        cost or profile("llama3-8b-h100"),
    ).run()


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
        self.result = RunResult(engine, config, options, cost)
        self.env = simpy.Environment()
        self.engine = make_engine(engine, config)
        self.executor = _make_executor(options, config)
        if isinstance(self.executor, SymbolicExecutor):
            self.executor.current_table = self._current_table
        self.wakeup = self.env.event()
        self.arrivals = Arrivals(self.env, trace, self._wake, options.vocab_size)
        self.accounting = AccountingChecker(config)
        self.protocol = ProtocolChecker(config.num_gpu_blocks)
        self.pool = PoolDeltaChecker()
        self.preempted_since_pool_check: set[str] = set()  # membership only
        self.fingerprint = Fingerprint()
        self.live: dict[str, EngineRequest] = {}
        self.num_tokens: dict[str, int] = {}
        self.sampled: dict[str, list[int]] = {}
        self.history: dict[str, deque[tuple[int, ...]]] = {}
        self.full_sweep_interval = options.pool_check_interval_steps  # 0: at the end only
        self.liveness_deadline_step: int | None = None
        self.fault_window_end_step: int | None = None
        self.empty_steps = 0
        self.done = False
        self.progress = _progress(options.progress)
        self.rng = np.random.default_rng(options.seed)  # the run's one generator (faults)
        self.coverage = Coverage(config.block_size, config.num_lookahead_tokens)
        self.kv_events = KVEventRecorder() if options.record_kv_events else None
        self.kv_groups = config.kv_cache_groups
        if len(self.kv_groups) > 1 and not isinstance(self.executor, SymbolicExecutor):
            raise ValueError(
                f"kv_groups {config.kv_groups!r}: only the symbolic executor reads "
                "several KV-cache groups"
            )
        self.spec_engine: SpecDecodeEngine | None = None  # set when drafts are scheduled
        self.drafter = self._make_drafter()
        # async scheduling: steps executed and not yet applied to the engine, oldest first
        self.depth = pipeline_depth(engine, self.engine, config)
        self.in_flight: deque[InFlight] = deque()
        self.runner_drafts: dict[str, tuple[int, ...]] = {}  # async: the drafter's, by request

    def _make_drafter(self) -> Drafter | None:
        """The drafter of speculative decoding with acceptance, or None (K = 0)."""
        k = self.config.num_speculative_tokens
        if k == 0:
            return None
        if not isinstance(self.engine, SpecDecodeEngine):
            raise ValueError(
                f"num_speculative_tokens={k}: engine {self.engine.name!r} does not schedule "
                "draft tokens (no update_draft_token_ids)"
            )
        if not hasattr(self.executor, "accepted_token_ids"):  # symbolic and tensor do
            raise ValueError(
                f"num_speculative_tokens={k}: executor {self.options.executor!r} does not "
                "verify drafts (use symbolic or tensor)"
            )
        self.spec_engine = self.engine
        return Drafter(k, self.options.draft_acceptance, self.rng, self.options.vocab_size)

    # -- running ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        started = time.perf_counter()
        proc = self.env.process(self._engine_process())
        try:
            self.env.run(until=proc)
        except (TraceError, EngineRefusal):
            raise  # bad input: the command line says so (exit 2)
        except Exception as exc:  # raised in the arrivals process: a harness crash too
            if str(exc).startswith(SIMPY_OUT_OF_EVENTS):
                self._out_of_events()
            else:
                self._fatal([_harness_crash(self.fingerprint.num_steps, exc)])
        finally:
            if self.progress is not None:
                self.progress.close()
        res = self.result
        res.wall_time_s = time.perf_counter() - started
        res.sim_time_s = float(self.env.now)
        res.fingerprint = self.fingerprint.hexdigest()
        res.steps = self.fingerprint.num_steps
        res.trace = list(self.arrivals.requests.values())
        for rid in self.live:  # unfinished (a violation or liveness stop): what was sampled
            res.outputs.setdefault(rid, list(self.sampled.get(rid, ())))
        res.requests = len(self.arrivals.released)
        res.invariants_checked += getattr(self.executor, "num_keys_checked", 0)
        engine_paths = getattr(self.engine, "rare_path_counts", None)
        if engine_paths is not None:
            self.coverage.observe_engine_paths(engine_paths())
        res.coverage = dict(self.coverage.counts)
        if self.kv_events is not None:
            res.kv_events = self.kv_events.events
        return res

    def _wake(self) -> None:
        if not self.wakeup.triggered:
            self.wakeup.succeed()

    def _sleep(self):
        if self.wakeup.triggered:
            self.wakeup = self.env.event()
        yield self.wakeup

    def _engine_process(self):
        while not self.done:
            try:
                self._drain_inbox()
                if self.in_flight and not self.engine.has_unfinished_requests():
                    self._complete_oldest()  # async: its output is still to be applied
                    continue
                if not self.engine.has_unfinished_requests():
                    lost = check_not_lost(self.fingerprint.num_steps, *self._lost())
                    if lost:  # the engine dropped a request without reporting it
                        self._fatal(lost)
                        return
                    if self.arrivals.done and not self.arrivals.inbox:
                        self._finish_run()
                        return
                    yield from self._sleep()
                    continue
                if self._liveness_exceeded():
                    return
                if self.options.faults and self.liveness_deadline_step is None:
                    self._inject_faults()  # safety phase only: the liveness phase is fault-free
                    if not self.engine.has_unfinished_requests():
                        continue
                output = self._call("schedule", self.engine.schedule)
                malformed = self.protocol.check_output(output, self.live, self.result.outputs)
                if malformed:  # nothing is derived from an output the protocol refuses
                    self._fatal(malformed)
                    return
                if not output.scheduled:
                    self._after_empty_step(output)
                    if self.in_flight and not self.done:  # async: step N+1 was empty
                        self._complete_oldest()
                        self.empty_steps = 0
                    if not self.done:
                        yield from self._sleep_or_stall()
                    continue
                self.empty_steps = 0
                if self.depth == 1:
                    yield from self._step(output)
                else:
                    yield from self._pipelined_step(output)
            except EngineCrash as crash:
                self._violate(
                    [
                        Violation(
                            "engine-crash",
                            self.fingerprint.num_steps,
                            str(crash),
                            found=crash.trace,
                        )
                    ]
                )
                self.done = True
            except Exception as exc:  # the harness itself raised: a finding, with its bundle
                self._fatal([_harness_crash(self.fingerprint.num_steps, exc)])

    def _fatal(self, violations: list[Violation]) -> None:
        """Violations after which the run cannot go on (ignored ones end it too)."""
        self._violate(violations)
        self.done = True

    def _step(self, output: SchedulerOutput):
        cfg, opts = self.config, self.options
        self.preempted_since_pool_check.update(output.preempted_req_ids)
        violations: list[Violation] = []
        if opts.check_invariants:
            violations += self.accounting.check_step(output, self.num_tokens)
            self.result.invariants_checked += 3 + 7 * len(output.scheduled)
        self._retire(output.finished_req_ids, "finished", None)
        self._reject(output)
        meta = build_metadata(
            output,
            cfg.block_size,
            num_lookahead_tokens=cfg.num_lookahead_tokens,
            max_model_len=cfg.max_model_len,
            kv_groups=self.kv_groups,
        )
        meta = apply_runner_mutant(meta, cfg.mutant)
        sampled = self.executor.execute(meta)
        accepted: dict[str, tuple[int, ...]] = getattr(self.executor, "accepted_token_ids", {})
        violations += getattr(self.executor, "violations", [])
        if opts.check_invariants:
            self.result.invariants_checked += meta.num_tokens  # causal alignment of every row
        self._record(output)
        self.coverage.observe_step(output, self.live)
        yield self.env.timeout(self.cost.step_time_us(meta) * 1e-6)
        violations = self._unignored(violations)
        if violations and not opts.keep_going:  # report before the engine sees the step
            self._violate(violations)
            return
        finished = self._update_engine(output, sampled, accepted)
        if self.spec_engine is not None:
            self._roll_back_rejected(output, accepted)
        violations += self.protocol.check_finished(
            output.step, finished, self.live, self.result.outputs
        )
        for rid, token in sampled.items():
            self._append_generated(rid, (*accepted.get(rid, ()), token))
        if opts.check_invariants:
            violations += self._after_update(output, finished)
        self._violate(violations)
        self._finish_requests(finished)
        if self.drafter is not None and not self.done:
            self._propose_drafts(sampled)

    def _update_engine(
        self,
        output: SchedulerOutput,
        sampled: dict[str, int],
        accepted: dict[str, tuple[int, ...]],
    ) -> list[FinishedRequest]:
        """The engine's update_from_output; an engine with drafts also gets the accepted."""
        if self.spec_engine is None:
            update = self.engine.update_from_output
            return self._call("update_from_output", update, output, sampled)
        update = self.spec_engine.update_from_output
        return self._call("update_from_output", update, output, sampled, accepted)

    def _append_generated(self, rid: str, tokens: tuple[int, ...]) -> None:
        """The tokens a request gained this step, up to its max_tokens (an engine stops
        there and drops the rest of a step's accepted drafts, as vLLM does)."""
        if rid not in self.live:
            return
        tokens = tokens[: max(self.live[rid].max_tokens - len(self.sampled[rid]), 0)]
        self.num_tokens[rid] += len(tokens)
        self.sampled[rid].extend(tokens)
        if self.drafter is not None and tokens:
            self.drafter.append(rid, tokens)

    def _roll_back_rejected(
        self, output: SchedulerOutput, accepted: dict[str, tuple[int, ...]]
    ) -> None:
        """Each request's next chunk starts after its last accepted draft; coverage."""
        for r in output.scheduled:
            if r.spec_token_ids and r.request_id in self.live:
                num_accepted = len(accepted.get(r.request_id, ()))
                self.accounting.roll_back(r.request_id, r.num_draft_tokens - num_accepted)
                self.coverage.observe_acceptance(r, num_accepted)

    def _propose_drafts(self, sampled: dict[str, int]) -> None:
        """The drafter's proposals for every request that sampled and still runs, handed to
        the engine (vLLM: EngineCore.post_step -> update_draft_token_ids)."""
        assert self.drafter is not None
        running = [rid for rid in sampled if rid in self.live]
        if running:
            drafts = self.drafter.propose(running)
            assert self.spec_engine is not None
            propose = self.spec_engine.update_draft_token_ids
            self._call("update_draft_token_ids", propose, drafts)

    def _pipelined_step(self, output: SchedulerOutput):
        """Async scheduling (vLLM's AsyncScheduler + EngineCore.step_with_batch_queue):
        step N+1 was scheduled while step N's output had not reached the engine. The runner
        executes N+1 (after N, in stream order; it fills in N's samples for the
        placeholders), then the engine gets N's output::

            schedule(N)  execute(N)  schedule(N+1)  execute(N+1)  update(N)  schedule(N+2) ...

        Every check follows that order: N+1's accounting and shadow-KV reads run against
        what the runner knows (N's samples included); the outputs and the pool are
        checked after update(N), when the engine has applied them.
        """
        cfg, opts = self.config, self.options
        engine_output, output = output, self._fill_placeholders(output)
        violations: list[Violation] = []
        if opts.check_invariants:
            violations += self.accounting.check_step(output, self.num_tokens)
            self.result.invariants_checked += 3 + 7 * len(output.scheduled)
        self._retire(output.finished_req_ids, "finished", None)
        self._reject(output)
        meta = build_metadata(
            output,
            cfg.block_size,
            num_lookahead_tokens=cfg.num_lookahead_tokens,
            max_model_len=cfg.max_model_len,
            kv_groups=self.kv_groups,
        )
        meta = apply_runner_mutant(meta, cfg.mutant)
        sampled = self.executor.execute(meta)
        violations += getattr(self.executor, "violations", [])
        if opts.check_invariants:
            self.result.invariants_checked += meta.num_tokens
        self._record(output)
        self.coverage.observe_step(output, self.live)
        accepted = self._runner_knows(output, sampled)
        yield self.env.timeout(self.cost.step_time_us(meta) * 1e-6)
        violations = self._unignored(violations)
        self._violate(violations)
        if self.done:  # a violation is reported before the engine sees the step
            return
        rejected = {
            r.request_id: r.num_draft_tokens - len(accepted.get(r.request_id, ()))
            for r in output.scheduled
            if r.spec_token_ids
        }
        self.in_flight.append(InFlight(engine_output, sampled, accepted, rejected))
        while len(self.in_flight) >= self.depth and not self.done:
            self._complete_oldest()

    def _complete_oldest(self) -> None:
        """Apply the oldest executed step's output to the engine, then check."""
        output, sampled, accepted, _ = self.in_flight.popleft()  # the engine's own output
        finished = self._update_engine(output, sampled, accepted)
        violations = self.protocol.check_finished(
            output.step, finished, self.live, self.result.outputs
        )
        if self.options.check_invariants:
            violations += self._after_update(output, finished)
        self._violate(violations)
        self._finish_requests(finished)

    def _runner_knows(
        self, output: SchedulerOutput, sampled: dict[str, int]
    ) -> dict[str, tuple[int, ...]]:
        """Async: what the runner knows after executing a step, before the engine does:
        every token it sampled (accepted drafts too, even past max_tokens: the engine drops
        those at its update), the drafts it rejected (the accounting rolls back now) and
        its drafter's proposals for the next step. Returns the accepted drafts."""
        accepted: dict[str, tuple[int, ...]] = {}
        if self.spec_engine is not None:
            accepted = getattr(self.executor, "accepted_token_ids", {})
            self._roll_back_rejected(output, accepted)
        for rid, token in sampled.items():
            gained = (*accepted.get(rid, ()), token)
            self.num_tokens[rid] += len(gained)
            self.sampled[rid].extend(gained)
            if self.drafter is not None and rid in self.live:
                self.drafter.append(rid, gained)
        if self.drafter is not None:
            running = [rid for rid in sampled if rid in self.live]
            self.runner_drafts = self.drafter.propose(running) if running else {}
        return accepted

    def _fill_placeholders(self, output: SchedulerOutput) -> SchedulerOutput:
        """The step as the runner runs it (sim/async_runner.py)."""
        rejected = self._unapplied_rejections()
        if not rejected and not any(has_placeholder(r) for r in output.scheduled):
            return output
        scheduled = tuple(
            self._as_run(r, rejected.get(r.request_id, 0))
            if has_placeholder(r) or r.request_id in rejected
            else r
            for r in output.scheduled
        )
        return dataclasses.replace(output, scheduled=scheduled)

    def _unapplied_rejections(self) -> dict[str, int]:
        """Drafts rejected in the steps executed and not yet applied to the engine."""
        out: dict[str, int] = {}
        for entry in self.in_flight:  # bounded: the pipeline depth
            for rid, n in entry.rejected.items():
                out[rid] = out.get(rid, 0) + n
        return out

    def _as_run(self, r: ScheduledRequest, num_rejected: int) -> ScheduledRequest:
        self.coverage.counts["async-output-placeholder"] += 1
        rid = r.request_id
        outputs = self.sampled.get(rid, []) if rid in self.live else []
        return as_run(r, outputs, num_rejected, self.runner_drafts.get(rid, ()))

    def _after_update(
        self, output: SchedulerOutput, finished: list[FinishedRequest]
    ) -> list[Violation]:
        step = output.step
        snapshot = self._call("kv_snapshot", self.engine.kv_snapshot)
        if self.kv_events is not None:
            self.kv_events.observe(step, snapshot)
        for f in finished:
            self.accounting.forget(f.request_id)
        unapplied = self._unapplied_rejections()
        out = self.accounting.check_agreement(step, snapshot.num_computed_tokens(), unapplied)
        for f in finished:
            out += self._check_outputs(step, f)
        out += self._check_pool(step, snapshot, finished)
        return out

    def _check_pool(self, step: int, snapshot, finished: list[FinishedRequest]) -> list[Violation]:
        """Every step: the blocks that changed (a full sweep every Nth step if asked)."""
        live = self.live.keys() - {f.request_id for f in finished}
        interval = self.full_sweep_interval
        self.pool.full.expected_content = self._expected_content(snapshot)
        if interval and self.fingerprint.num_steps % interval == 0:
            out = self.pool.sweep(step, snapshot, live, self._block_contents)
        else:
            preempted = self.preempted_since_pool_check
            out = self.pool.check(step, snapshot, live, self._block_contents, preempted)
        self.pool.full.expected_content = None  # the snapshot does not outlive the step
        self.preempted_since_pool_check = set()
        self.result.invariants_checked += 3 * self.pool.num_blocks_checked
        return out

    def _check_outputs(self, step: int, finished: FinishedRequest) -> list[Violation]:
        request = self.live.get(finished.request_id)
        if request is None or finished.reason != "length":
            return []
        self.result.invariants_checked += 3
        # async: the runner may sample past max_tokens (a step scheduled before the engine
        # saw the last one); the engine must return exactly the first max_tokens
        sampled = np.asarray(self.sampled[finished.request_id][: request.max_tokens], np.int64)
        return check_finished(
            step,
            finished,
            request.prompt_token_ids,
            sampled,
            request.max_tokens,
            self.options.vocab_size,
            hash_model.salt_identity(request.cache_salt),
            unchunked=getattr(self.executor, "hash_model_tokens", False),
            max_model_len=self.config.max_model_len,
        )

    def _current_table(self, request_id: str):
        return self._call("kv_snapshot", self.engine.kv_snapshot).block_tables().get(request_id)

    def _after_empty_step(self, output: SchedulerOutput) -> None:
        """A step that runs nothing may still preempt, finish or reject requests."""
        self.preempted_since_pool_check.update(output.preempted_req_ids)
        self._retire(output.finished_req_ids, "finished", None)
        self._reject(output)
        if output.preempted_req_ids:
            if self.options.check_invariants:
                self._violate(self.accounting.check_step(output, self.num_tokens))
            if isinstance(self.executor, SymbolicExecutor):  # it drops what they verified
                meta = build_metadata(output, self.config.block_size, kv_groups=self.kv_groups)
                self.executor.execute(meta)
            self.coverage.observe_step(output, self.live)
        if output.discarded and isinstance(self.executor, SymbolicExecutor):
            self.executor.execute(build_metadata(output, self.config.block_size))  # their KV
            self._violate(self._unignored(self.executor.violations))
        if output.rejected_req_ids or output.finished_req_ids or output.preempted_req_ids:
            self._record(output)
            self.empty_steps = 0
        else:
            self.empty_steps += 1

    def _sleep_or_stall(self):
        """After a step that ran nothing: retry at once after progress, else wait or fail."""
        if self.empty_steps == 0 or not self.engine.has_unfinished_requests():
            return
        if self.empty_steps > self.options.stall_steps_max:
            self._stuck("the engine schedules nothing while requests wait")
            return
        if not (self.arrivals.idle and not self.arrivals.inbox):
            yield from self._sleep()  # else retry at once (a one-step fault may have passed)

    # -- requests in and out ----------------------------------------------------------------

    def _drain_inbox(self) -> None:
        inbox = self.arrivals.inbox
        for _ in range(len(inbox)):  # bounded: what is queued now
            item = inbox.popleft()
            if isinstance(item, Release):
                self._add(item)
            elif isinstance(item, Abort) and item.request_id in self.live:
                self._abort(item.request_id)
        if self.arrivals.done and self.liveness_deadline_step is None:
            self._start_liveness_phase()

    def _abort(self, request_id: str) -> None:
        self.coverage.observe_abort(request_id)
        self._call("abort_request", self.engine.abort_request, request_id)
        self._retire((request_id,), "aborted", None)

    def _inject_faults(self) -> None:
        step = self.fingerprint.num_steps
        for kind in draw_faults(self.options.faults, self.rng):
            if kind == "abort-mid-chunk":
                candidates = [rid for rid in self.coverage.mid_prefill_ids() if rid in self.live]
                if candidates:
                    victim = candidates[int(self.rng.integers(len(candidates)))]
                    self._abort(victim)
                    self.result.faults_fired.append(f"step {step}: {kind}: aborted {victim}")
                continue
            inject = getattr(self.engine, "inject_fault", None)
            what = self._call("inject_fault", inject, kind, self.rng) if inject else None
            if what:
                self.result.faults_fired.append(f"step {step}: {kind}: {what}")

    def _add(self, release: Release) -> None:
        trace_req = release.request
        request = EngineRequest(
            request_id=trace_req.request_id,
            prompt_token_ids=release.prompt_token_ids,
            max_tokens=trace_req.output_length,
            arrival_time_s=float(self.env.now),
            priority=trace_req.priority,
            cache_salt=trace_req.cache_salt,
        )
        self.live[request.request_id] = request
        self.num_tokens[request.request_id] = request.num_prompt_tokens
        self.sampled[request.request_id] = []
        if self.drafter is not None:
            salt = hash_model.salt_identity(request.cache_salt)
            self.drafter.add_request(request.request_id, request.prompt_token_ids, salt)
        if request.cache_salt is None:
            self.executor.add_request(request.request_id, request.prompt_token_ids)
        else:
            self.executor.add_request(
                request.request_id, request.prompt_token_ids, cache_salt=request.cache_salt
            )
        self._call("add_request", self.engine.add_request, request)

    def _finish_requests(self, finished: list[FinishedRequest]) -> None:
        for f in finished:
            self._retire((f.request_id,), "finished", f.output_token_ids)

    def _reject(self, output: SchedulerOutput) -> None:
        self._retire(output.rejected_req_ids, "rejected", None)

    def _retire(
        self, request_ids: Iterable[str], how: str, outputs: tuple[int, ...] | None
    ) -> None:
        for rid in request_ids:
            if self.live.pop(rid, None) is None:
                continue
            done = tuple(self.sampled.get(rid, ())) if outputs is None else tuple(outputs)
            self.result.outputs[rid] = list(done)
            if how == "finished":
                self.result.finished += 1
            elif how == "aborted":
                self.result.aborted += 1
            else:
                self.result.rejected += 1
            self.executor.finish_request(rid)
            if self.drafter is not None:
                self.drafter.forget(rid)
            self.accounting.forget(rid)
            self.protocol.forget(rid)
            self.coverage.forget(rid)
            self.num_tokens.pop(rid, None)
            self.sampled.pop(rid, None)
            self.history.pop(rid, None)
            self.arrivals.finished(rid, done)
        if self.progress is not None and self.fingerprint.num_steps % 64 == 0:
            self.progress.n = self.result.finished + self.result.aborted + self.result.rejected
            self.progress.set_postfix(
                sim_s=f"{self.env.now:.0f}", steps=self.fingerprint.num_steps, refresh=False
            )
            self.progress.refresh()

    # -- bookkeeping ------------------------------------------------------------------------

    def _record(self, output: SchedulerOutput) -> None:
        self.fingerprint.update(output)
        if self.options.record_schedule:
            self.result.schedule.append(output)
        keep = self.options.context_steps
        for r in output.scheduled:
            hist = self.history.get(r.request_id)
            if hist is None:
                hist = self.history[r.request_id] = deque(maxlen=keep)
            hist.append(
                (
                    output.step,
                    r.num_computed_tokens,
                    r.num_scheduled_tokens,
                    r.num_tokens,
                    r.num_cached_tokens,
                    len(r.block_table),
                    *r.block_table[-3:],
                )
            )
        if self.fingerprint.num_steps >= self.options.steps_max:
            self._stuck(f"steps_max {self.options.steps_max} reached")

    def _unignored(self, violations: list[Violation]) -> list[Violation]:
        """The violations not of an ignored invariant (those are only counted)."""
        if not self.options.ignore or not violations:
            return violations
        kept = []
        for v in violations:
            if v.invariant in self.options.ignore:
                self.result.ignored[v.invariant] = self.result.ignored.get(v.invariant, 0) + 1
            else:
                kept.append(v)
        return kept

    def _violate(self, violations: list[Violation]) -> None:
        violations = self._unignored(violations)
        if not violations:
            return
        now = float(self.env.now)
        self.result.violations.extend(
            dataclasses.replace(v, sim_time_s=now, context=self._context(v.request_id))
            for v in violations
        )
        if not self.options.keep_going:
            self.done = True

    def _context(self, request_id: str) -> tuple[str, ...]:
        lines = []
        for step, ncomp, nsched, ntok, ncached, nblocks, *tail in self.history.get(request_id, ()):
            lines.append(
                f"step {step}: num_computed_tokens {ncomp} + num_scheduled_tokens "
                f"{nsched} of num_tokens {ntok} (cached {ncached}); {nblocks} blocks, "
                f"last {list(tail)}"
            )
        return tuple(lines)

    def _expected_content(self, snapshot) -> ExpectedContent | None:
        """What each cached hash must hold, where the engine says what its hashes mean
        (`hash_positions`: vLLM v1) and the executor knows those tokens' KV."""
        positions = getattr(snapshot, "hash_positions", None)
        identity_at = getattr(self.executor, "identity_at", None)
        if positions is None or identity_at is None:
            return None

        def expected(hashes: list[bytes]) -> list[tuple[int, str, str] | None]:
            out: list[tuple[int, str, str] | None] = []
            for where in positions(hashes):  # bounded: the blocks cached since the last check
                identity = 0 if where is None else identity_at(*where)
                if where is None or not identity:
                    out.append(None)
                    continue
                request_id, position, group = where
                words = f"{request_id}'s tokens up to position {position}"
                words += f" (KV-cache group {group})" if group else ""
                out.append((identity, request_id, words))
            return out

        return expected

    def _block_contents(self, block_ids: np.ndarray):
        contents = getattr(self.executor, "block_contents", None)
        if contents is None:  # an executor without a shadow: no content to check
            return np.zeros(block_ids.size, np.uint64), np.ones(block_ids.size, bool)
        return contents(block_ids)

    def _call(self, where: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # the engine under test raised: a finding
            raise EngineCrash(where, exc) from exc

    # -- liveness ---------------------------------------------------------------------------

    def _liveness_bound(self) -> int:
        """Steps to finish the live requests one at a time, doubled, plus a margin. A request
        runs at most min(budget, long_prefill_token_threshold) tokens a step."""
        if self.options.liveness_steps_max:
            return self.options.liveness_steps_max
        tokens_per_step = self.config.max_num_batched_tokens
        threshold = self.config.long_prefill_token_threshold
        if 0 < threshold < tokens_per_step:
            tokens_per_step = threshold
        tokens_per_step, prefill_interval = _engine_step_limits(self.config, tokens_per_step)
        work = sum(
            prefill_interval * -(-(self.num_tokens[rid]) // tokens_per_step)
            + req.max_tokens
            - len(self.sampled[rid])
            for rid, req in self.live.items()
        )
        return 2 * work + 2 * len(self.live) + 1000

    def _start_liveness_phase(self) -> None:
        """Nothing more arrives: after FAULT_STEPS_AFTER_ARRIVALS more steps with faults (if
        any), faults stop and every request must finish within a bound of the work left."""
        step = self.fingerprint.num_steps
        if self.options.faults:
            if self.fault_window_end_step is None:
                self.fault_window_end_step = step + FAULT_STEPS_AFTER_ARRIVALS
            if step < self.fault_window_end_step:
                return
        self.liveness_deadline_step = step + self._liveness_bound()

    def _liveness_exceeded(self) -> bool:
        deadline = self.liveness_deadline_step
        if deadline is None or self.fingerprint.num_steps < deadline:
            return False
        self._stuck(f"not finished {deadline} steps after the last arrival")
        return True

    def _stuck(self, why: str) -> None:
        reasons = self._call("waiting_reasons", self.engine.waiting_reasons)
        self.result.stuck = {rid: reasons.get(rid, why) for rid in self.live}
        self.result.stuck.setdefault("*", why)
        self.done = True

    def _lost(self) -> tuple[list[str], dict[str, str]]:
        """The live requests, and each later turn waiting for a predecessor -> that one."""
        waiting = {
            turn.request_id: parent
            for parent, turns in self.arrivals.waiting_on.items()
            for turn in turns
        }
        return sorted(self.live), waiting

    def _out_of_events(self) -> None:
        """SimPy has nothing left to run while the loop waits: a liveness failure naming
        what each request waits for (the loop's own checks should end a run before)."""
        live, waiting = self._lost()
        why = "nothing left to run (SimPy out of events)"
        stuck = {rid: f"{why}: live, never reported finished" for rid in live}
        stuck.update(
            {turn: f"{why}: a later turn waiting for {parent}" for turn, parent in waiting.items()}
        )
        self.result.stuck = {"*": why, **stuck}
        self.done = True

    def _finish_run(self) -> None:
        self.done = True
        snapshot = self._call("kv_snapshot", self.engine.kv_snapshot)
        self.coverage.observe_evictions(getattr(snapshot, "num_evicted_blocks", None))
        self.coverage.observe_window_frees(
            getattr(snapshot, "num_sliding_window_blocks_freed", None)
        )
        if self.options.check_invariants:
            step = self.fingerprint.num_steps
            violations = self.pool.sweep(step, snapshot, set(), self._block_contents)
            self._violate(violations + check_no_leak(step, snapshot))


def _engine_step_limits(config: EngineConfig, tokens_per_step: int) -> tuple[int, int]:
    """(tokens a request may run per step, steps per prefill step) under vLLM's scheduler
    options (EngineConfig.extra: vllm:max_num_scheduled_tokens caps the step's tokens;
    vllm:prefill_schedule_interval runs prefill once every N steps)."""
    scheduled_max = config.extra.get("vllm:max_num_scheduled_tokens", "none")
    if scheduled_max.lower() != "none":
        tokens_per_step = min(tokens_per_step, int(scheduled_max))
    return tokens_per_step, int(config.extra.get("vllm:prefill_schedule_interval", "1"))


def pipeline_depth(name: str, engine: object, config: EngineConfig) -> int:
    """Steps in flight: 1, or 2 under async scheduling, for an engine that models it (a
    ValueError otherwise: the CLI's exit 2)."""
    if not is_async_scheduling(config):
        return 1
    if not getattr(engine, "supports_async_scheduling", False):
        raise ValueError(
            f"engine {name!r} does not model async scheduling (--async-scheduling): "
            "use --engine vllm-v1"
        )
    return 2


def _make_executor(options: SimOptions, config: EngineConfig):
    if options.executor == "symbolic":
        return SymbolicExecutor(config.num_gpu_blocks, config.block_size, options.vocab_size)
    if options.executor == "hash":
        return HashModelExecutor(options.vocab_size)
    if options.executor == "tensor":
        module_name, _, attr = TENSOR_EXECUTOR.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        return factory(
            block_size=config.block_size,
            num_blocks=config.num_gpu_blocks,
            **dict(options.executor_options),
        )
    raise ValueError(f"unknown executor {options.executor!r}: use symbolic, hash or tensor")


def _harness_crash(step: int, exc: Exception) -> Violation:
    return Violation(
        HARNESS_CRASH,
        step,
        f"the harness raised {type(exc).__name__}: {exc}",
        found="".join(traceback.format_exception(exc)),
    )


def _progress(enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(desc="replay", unit="req", leave=False, dynamic_ncols=True)
