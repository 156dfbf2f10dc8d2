"""A campaign: workers in parallel, each its own seed stream, until a finding or the budget.

    replay the failure database's findings of this target (.schedcheck/fuzz/)
      └─ one still fails -> that is the finding (no fuzzing), as it fails today: new
         raw and shrunk bundles, the recorded entry named in `replayed_from`
    start `workers` processes (spawn), worker w fuzzes rounds r = w, w + workers, ...
    (worker.py; a round's seed depends on the campaign seed and r alone: seeds.py)
      └─ a bug found in round r -> every worker stops after round r; the finding is the
         one of the least round, so the same seed gives the same finding whatever the
         number of workers and their speeds (and on Ray: ray_campaign.py)
    Ctrl-C -> workers stop at once (a shrink in progress ends with what it has); every
              finding already made is kept: raw bundles are written when first seen

With one worker everything runs in this process (no spawn); that is what tests use.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_module
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedcheck.engines.capabilities import config_refusals
from schedcheck.engines.protocol import Engine, EngineConfig
from schedcheck.fuzz.database import FailureDB
from schedcheck.fuzz.families import (
    drawable_families,
    draws_async,
    draws_eos,
    draws_lookahead,
    draws_sliding_window,
    draws_spec_decode,
    draws_vllm_options,
    undrawable_families,
)
from schedcheck.fuzz.heap import SetupHeap
from schedcheck.fuzz.replay_db import replay_findings
from schedcheck.fuzz.swarm import (
    SwarmSpec,
    block_sizes,
    fixed_block_manager,
)
from schedcheck.fuzz.worker import WorkerJob, run_worker
from schedcheck.sim.blame import build_engine
from schedcheck.sim.coverage import FAULT_PATHS, RARE_PATHS, merge, never_reached

GRACE_S = 60.0  # after the budget: time for a worker to finish its shrink and its bundle
_NO_STOP = 2**62


@dataclass(frozen=True)
class CampaignOptions:
    spec: SwarmSpec
    seed: int = 0
    workers: int = 1
    budget_s: float = 60.0
    out_dir: str = ".schedcheck/fuzz/findings"
    db_dir: str | None = ".schedcheck/fuzz"  # None: no failure database
    examples_per_round: int = 32
    examples_max: int | None = None  # per worker
    shrink_runs_max: int = 200
    shrink_budget_s: float = 60.0
    on_ray: bool = False  # rounds as Ray tasks (ray_campaign.py) instead of local processes
    ray_address: str | None = None  # None: a local Ray; "auto" or HOST:PORT: a cluster

    def __post_init__(self) -> None:
        assert self.workers >= 1 and self.budget_s > 0 and self.examples_per_round >= 1


@dataclass
class CampaignResult:
    options: CampaignOptions
    finding: dict[str, Any] | None = None
    examples: int = 0
    repeats: int = 0  # examples whose scenario their worker had judged already (verdict_memo)
    coverage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RARE_PATHS, 0))
    raw: list[dict[str, Any]] = field(default_factory=list)
    clean_failures: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # every worker's
    elapsed_s: float = 0.0
    interrupted: bool = False
    replayed: bool = False  # the finding came from the failure database
    errors: list[str] = field(default_factory=list)
    progress: list[tuple[float, int]] = field(default_factory=list)  # (elapsed_s, examples)
    configs: dict[str, dict[str, int]] = field(default_factory=dict)  # knob -> value -> count
    started_at_s: float = field(default_factory=time.time)
    evictions_counted: bool = True  # the engine's snapshot has num_evicted_blocks
    engine_paths: tuple[str, ...] = ()  # the rare paths the engine counts itself

    @property
    def found(self) -> bool:
        return self.finding is not None

    def handle(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "progress":
            self.examples += int(message["examples"])
            self.repeats += int(message.get("repeats", 0))
            self.coverage = merge(self.coverage, message["coverage"])
            self.progress.append((round(time.time() - self.started_at_s, 3), self.examples))
            for knob, counts in sorted(message.get("configs", {}).items()):
                mine = self.configs.setdefault(knob, {})
                for value, n in sorted(counts.items()):
                    mine[value] = mine.get(value, 0) + int(n)
        elif kind == "raw":
            self.raw.append(message)
        elif kind == "clean-failure":
            self.clean_failures.append(message)
        elif kind == "finding":
            self.findings.append(message)
            self.finding = min(self.findings, key=lambda f: (f["round"], f["worker"]))
        elif kind == "error":
            self.errors.append(str(message["error"]))

    def never_reached(self) -> list[str]:
        """Rare paths of those the engine and the swarm can reach that no example reached."""
        spec = self.options.spec
        prefix_caching = True in spec.capabilities.enable_prefix_caching
        missed = never_reached(
            self.coverage,
            drafts=draws_lookahead(spec),
            prefix_caching=prefix_caching,
            vllm_options=draws_vllm_options(spec),
            async_scheduling=draws_async(spec),
            spec=draws_spec_decode(spec),
            sliding=draws_sliding_window(spec),
            aborts=spec.capabilities.aborts,
            evictions_counted=self.evictions_counted,
            engine_paths=self.engine_paths,
            eos=draws_eos(spec),
        )
        unreachable = self._unreachable()
        return [path for path in missed if path not in unreachable]

    def _unreachable(self) -> tuple[str, ...]:
        """Option paths this campaign's draws cannot reach beyond never_reached's own (which
        leaves out ASYNC_PATHS where async scheduling is not drawn): without it no step in
        flight at a reset; without faults drawn no fault path; under --family priority no
        cache-aware reorder (vLLM applies the window under FCFS only)."""
        spec = self.options.spec
        out: tuple[str, ...] = () if spec.faults else FAULT_PATHS
        if not draws_async(spec):
            out += ("reset-with-step-in-flight",)
        if "priority" in spec.families:
            out += ("cache-aware-reorder",)
        return out

    def unmeasured(self) -> list[str]:
        """Rare paths the engine does not let the harness count (a snapshot without
        num_evicted_blocks): neither reached nor unreached."""
        return [] if self.evictions_counted else ["evict-cached-block"]


def check_target(spec: SwarmSpec) -> Engine:
    """The engine built once; raise ValueError (bad input) if the engine, mutant or block
    manager cannot load, or the engine declares no support for the block manager the spec
    fixes."""
    undrawable = undrawable_families(spec)
    if undrawable:
        raise ValueError(
            f"engine {spec.engine} cannot draw --family {', '.join(undrawable)} "
            f"(it draws {', '.join(drawable_families(spec)) or 'none'})"
        )
    caps = spec.capabilities
    config = EngineConfig(
        block_size=block_sizes(caps)[0],
        num_gpu_blocks=8,
        mutant=spec.mutant,
        block_manager=fixed_block_manager(spec) or caps.block_managers[0],
        enable_prefix_caching=caps.enable_prefix_caching[0],
        enable_chunked_prefill=caps.enable_chunked_prefill[0],
    )
    refusals = config_refusals(caps, config)
    if refusals:
        raise ValueError(f"engine {spec.engine} does not support {'; '.join(refusals)}")
    return build_engine(spec.engine, caps.fit(config))


def run_campaign(
    opts: CampaignOptions, on_message: Callable[[dict[str, Any]], None] | None = None
) -> CampaignResult:
    """Run a campaign; `on_message` sees every worker message (progress bars). The
    engine's first build (its imports) runs with the garbage collector paused (heap.py)."""
    with SetupHeap() as heap:
        engine = heap.build(check_target, opts.spec)
        return _run_campaign(opts, engine, on_message)


def _run_campaign(
    opts: CampaignOptions, engine: Engine, on_message: Callable[[dict[str, Any]], None] | None
) -> CampaignResult:
    result = CampaignResult(opts)
    result.evictions_counted = counts_evictions(engine)
    result.engine_paths = engine_counted_paths(engine)
    started = time.time()
    db = FailureDB(Path(opts.db_dir)) if opts.db_dir is not None else None

    def handle(message: dict[str, Any]) -> None:
        result.handle(message)
        if on_message is not None:
            on_message(message)

    try:
        if db is not None and replay_findings(
            db, opts.spec, started, Path(opts.out_dir).resolve(), handle
        ):
            result.replayed = True
        elif opts.on_ray:
            _run_on_ray(opts, started, handle)
        elif opts.workers == 1:
            _run_here(opts, started, handle)
        else:
            _run_spawned(opts, started, handle)
    except KeyboardInterrupt:
        result.interrupted = True
    result.elapsed_s = time.time() - started
    if db is not None and result.finding is not None and not result.replayed:
        db.add(opts.spec, _db_entry(result.finding))
    return result


def counts_evictions(engine: Engine) -> bool:
    """Does the engine's KV snapshot count its evictions (the optional num_evicted_blocks)?"""
    return getattr(engine.kv_snapshot(), "num_evicted_blocks", None) is not None


def engine_counted_paths(engine: Engine) -> tuple[str, ...]:
    """The rare paths the engine counts itself (its optional rare_path_counts()), sorted."""
    counts = getattr(engine, "rare_path_counts", None)
    return tuple(sorted(counts())) if counts is not None else ()


def _db_entry(finding: dict[str, Any]) -> dict[str, Any]:
    keys = ("bundle", "scenario", "kind", "signature", "headline", "shrunk_requests")
    return {k: finding.get(k) for k in keys}


def _job(opts: CampaignOptions, worker_index: int, started: float) -> WorkerJob:
    return WorkerJob(
        spec=opts.spec,
        campaign_seed=opts.seed,
        worker_index=worker_index,
        budget_s=opts.budget_s,
        started_at_s=started,
        out_dir=str(Path(opts.out_dir).resolve()),
        db_dir=str(Path(opts.db_dir).resolve()) if opts.db_dir else None,
        examples_per_round=opts.examples_per_round,
        examples_max=opts.examples_max,
        shrink_runs_max=opts.shrink_runs_max,
        shrink_budget_s=opts.shrink_budget_s,
        rounds_stride=opts.workers,
    )


def _run_on_ray(
    opts: CampaignOptions, started: float, handle: Callable[[dict[str, Any]], None]
) -> None:
    """`workers` rounds in flight as Ray tasks; the same rounds, seeds and finding."""
    from schedcheck.fuzz.ray_campaign import run_rounds_on_ray  # imports ray lazily

    run_rounds_on_ray(
        _job(opts, 0, started),
        opts.ray_address,
        opts.workers,
        deadline_s=started + opts.budget_s,
        hard_deadline_s=started + opts.budget_s + opts.shrink_budget_s + GRACE_S,
        handle=handle,
        examples_max=None if opts.examples_max is None else opts.examples_max * opts.workers,
    )


def _run_here(
    opts: CampaignOptions, started: float, handle: Callable[[dict[str, Any]], None]
) -> None:
    """One worker in this process; a first Ctrl-C asks it to stop, a second interrupts."""
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():

        def on_sigint(signum: int, frame: object) -> None:
            if stop.is_set():
                raise KeyboardInterrupt
            stop.set()

        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        run_worker(_job(opts, 0, started), handle, lambda r: stop.is_set(), stop.is_set)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if stop.is_set():
        raise KeyboardInterrupt


def _worker_main(job: WorkerJob, messages: Any, stop_round: Any, stop: Any) -> None:
    """A spawned worker: Ctrl-C is the campaign's to handle (it sets `stop`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def should_stop(round_index: int) -> bool:
        return stop.is_set() or round_index > stop_round.value

    try:
        with SetupHeap() as heap:  # the engine's imports, as run_campaign's (heap.py)
            heap.build(check_target, job.spec)
            run_worker(job, messages.put, should_stop, stop.is_set)
    except Exception as exc:  # reported, the campaign goes on
        messages.put(
            {"type": "error", "worker": job.worker_index, "error": f"{type(exc).__name__}: {exc}"}
        )
        messages.put({"type": "done", "worker": job.worker_index, "examples": 0})


def _run_spawned(
    opts: CampaignOptions, started: float, handle: Callable[[dict[str, Any]], None]
) -> None:
    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    stop_round = ctx.Value("q", _NO_STOP)
    stop = ctx.Event()
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(_job(opts, w, started), messages, stop_round, stop),
            daemon=True,
        )
        for w in range(opts.workers)
    ]
    for proc in procs:
        proc.start()
    try:
        _collect(opts, started, messages, stop_round, stop, handle)
    except KeyboardInterrupt:
        stop.set()
        _drain(messages, handle, procs, seconds=5.0)
        raise
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()


def _collect(opts, started, messages, stop_round, stop, handle) -> None:
    """Handle messages until every worker is done (or the hard deadline passes)."""
    done: set[int] = set()
    hard_deadline = started + opts.budget_s + opts.shrink_budget_s + GRACE_S
    while len(done) < opts.workers and time.time() < hard_deadline:  # bounded by the deadline
        try:
            message = messages.get(timeout=0.2)
        except queue_module.Empty:
            continue
        handle(message)
        if message["type"] == "finding":
            with stop_round.get_lock():
                stop_round.value = min(stop_round.value, int(message["round"]))
        elif message["type"] == "done":
            done.add(int(message["worker"]))
    stop.set()


def _drain(messages, handle, procs, seconds: float) -> None:
    """After Ctrl-C: the messages workers still send while they stop."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(p.is_alive() for p in procs):
        try:
            handle(messages.get(timeout=0.2))
        except queue_module.Empty:
            continue
    while True:
        try:
            handle(messages.get_nowait())
        except queue_module.Empty:
            return
