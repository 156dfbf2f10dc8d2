#!/usr/bin/env python3
"""Where a checked step's CPU time goes: each phase of the engine loop wrapped with
`process_time` (no profiler, so Python-heavy code is not inflated), on a window of the
Mooncake conversation trace through the reference engine with every invariant.

    python bench/replay_phases.py --max-requests 1000
    python bench/replay_phases.py --max-requests 1000 --json

Phases (us per recorded step): the engine's schedule(), update_from_output() and
add_request(); the symbolic executor (shadow-KV writes and reads); the block-pool check;
the runner metadata; the fingerprint; the accounting checks; the ledger's per-step
bookkeeping (remember, gain); coverage; the rest (SimPy, arrivals, retiring, the loop).
Not a test: numbers to read beside each other, with the load average.

`--by-kind` splits each phase by the kind of step it ran in: decode steps (every scheduled
request runs one token) and prefill steps (a chunk of more), with each kind's step count.
A step runs from one schedule() call to the next: its schedule(), then all it caused; what
comes before the first schedule() (the first arrivals' add_request) is in no kind. Only
with `--by-kind` is schedule() wrapped for it (and `--json` given `us_per_step_by_kind`).

`--inside` also times the parts of the two costliest checks, the pool check and the shadow
KV (`INSIDE_PARTS`: the tables' diff, the compiled walk, the hash memory, the common step,
...), each at any depth: listed after the total, in no sum, and their own timer calls
(two `process_time` calls each) are in the phases they run in.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import schedcheck.sim.loop as loop_module
from schedcheck.sim.deployment import LLAMA3_8B_H100
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces import iter_trace

TRACE = (
    Path(__file__).resolve().parents[1] / "traces/corpus/real/mooncake/conversation_trace.jsonl.xz"
)


class Phases:
    def __init__(self) -> None:
        self.cpu_s: dict[str, float] = {}
        self.depth = 0  # nested phases count once, in the outer one
        self.inside: set[str] = set()  # parts timed inside a phase: in no sum of phases

    def wrap(self, name: str, fn: Callable[..., Any], inside: bool = False) -> Callable[..., Any]:
        """`fn` timed as phase `name`; or, `inside`, as a part of whichever phase runs it
        (timed at any depth, left out of the phases' sum)."""
        self.cpu_s.setdefault(name, 0.0)
        if inside:
            self.inside.add(name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth and not inside:
                return fn(*args, **kwargs)
            self.depth += 1
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu_s[name] += time.process_time() - t0
                self.depth -= 1

        return timed

    def patch(self, obj: object, attr: str, name: str) -> None:
        setattr(obj, attr, self.wrap(name, getattr(obj, attr)))

    def phases_s(self, cpu_s: dict[str, float]) -> float:
        """The sum of `cpu_s` over the phases (the parts inside them left out)."""
        return sum(v for name, v in cpu_s.items() if name not in self.inside)


# --inside: the parts of the two costliest checks (module, class or None, attribute, name);
# a part timed inside a phase also adds its timer calls to that phase
INSIDE_PARTS = (
    ("invariants.pool_tables", "KeptTables", "diff", "pool: the tables' diff"),
    ("invariants.pool_delta", "PoolDeltaChecker", "_walk_changed", "pool: the walk, ids built"),
    ("invariants.pool_delta_kernels", None, "step_blocks", "pool: the walk's kernel"),
    ("invariants.pool_delta", "PoolDeltaChecker", "_check_cached", "pool: the cached blocks"),
    ("engines.reference.block_pool", "BlockPool", "flush_hash_words", "pool: engine's hash words"),
    ("invariants.hash_memory", "HashMemory", "remember_words", "pool: the hash memory"),
    ("sim.symbolic", "SymbolicExecutor", "block_contents", "pool: the blocks' contents"),
    ("sim.symbolic", "SymbolicExecutor", "_build_unread", "shadow: new requests built"),
    ("sim.common_step", "CommonStep", "_common_step", "shadow: the common step"),
    ("sim.step_kernel", None, "common_step", "shadow: the common step's kernel"),
    ("sim.common_step", "CommonStep", "_tables_keep_verified", "shadow: tables kept verified"),
    ("sim.common_step", "CommonStep", "_grow_tables", "shadow: verified tables grown"),
)


def patch_inside(phases: Phases) -> list[tuple[object, str, Any]]:
    """INSIDE_PARTS timed by `phases` (on their classes and modules: every simulation of
    this process); returns what `unpatch` puts back."""
    saved = []
    for module_name, class_name, attr, name in INSIDE_PARTS:  # bounded: the parts
        owner: object = importlib.import_module(f"schedcheck.{module_name}")
        if class_name is not None:
            owner = getattr(owner, class_name)
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, phases.wrap(name, getattr(owner, attr), inside=True))
    return saved


def unpatch(saved: list[tuple[object, str, Any]]) -> None:
    for owner, attr, original in reversed(saved):  # bounded: the parts patched
        setattr(owner, attr, original)


STEP_KINDS = ("decode", "prefill")


def step_kind(output: Any) -> str:
    """'decode' where every scheduled request runs one token (a step that schedules none
    as well), else 'prefill'."""
    if all(r.num_scheduled_tokens == 1 for r in output.scheduled):
        return "decode"
    return "prefill"


class StepKinds:
    """The phases' CPU split by kind of step: each schedule() call closes the step before
    it, whose kind its own schedule() returned; `close` ends the last one."""

    def __init__(self, phases: Phases, clock: Callable[[], float] = time.process_time) -> None:
        self.phases, self.clock = phases, clock
        self.cpu_s: dict[str, dict[str, float]] = {kind: {} for kind in STEP_KINDS}
        self.num_steps = dict.fromkeys(STEP_KINDS, 0)
        self._kind: str | None = None  # the open step's kind (None: no step yet)
        self._start_s = 0.0  # the clock at the open step's schedule() call
        self._phases_then: dict[str, float] = {}  # the phases' totals then

    def wrap_schedule(self, schedule: Callable[..., Any]) -> Callable[..., Any]:
        """`schedule` (the engine's, phase-timed already) closing the step before it."""

        def scheduled(*args: Any, **kwargs: Any) -> Any:
            self.close()
            self._start_s, self._phases_then = self.clock(), dict(self.phases.cpu_s)
            output = schedule(*args, **kwargs)
            self._kind = step_kind(output)
            return output

        return scheduled

    def close(self) -> None:
        """The open step's phase CPU and its whole CPU (under 'total') to its kind."""
        if self._kind is None:
            return
        into = self.cpu_s[self._kind]
        for name, total_s in self.phases.cpu_s.items():
            into[name] = into.get(name, 0.0) + total_s - self._phases_then.get(name, 0.0)
        into["total"] = into.get("total", 0.0) + self.clock() - self._start_s
        self.num_steps[self._kind] += 1
        self._kind = None

    def us_per_step(self) -> dict[str, dict[str, float]]:
        """Per kind: each phase's us a step of that kind, the rest and the total, and
        `steps`, the kind's step count."""
        out: dict[str, dict[str, float]] = {}
        for kind in STEP_KINDS:
            cpu, steps = self.cpu_s[kind], self.num_steps[kind]
            per = {name: 1e6 * s / max(steps, 1) for name, s in cpu.items() if name != "total"}
            total_us = 1e6 * cpu.get("total", 0.0) / max(steps, 1)
            per[REST] = total_us - self.phases.phases_s(per)
            out[kind] = {**per, "total": total_us, "steps": steps}
        return out


REST = "the rest (SimPy, arrivals, the loop)"


def window_simulation(
    args: argparse.Namespace, check_invariants: bool = True, num_gpu_blocks: int | None = None
) -> Simulation:
    """The window (`--trace`, `--max-requests`, `--block-size`) through the reference
    engine: every invariant, or the bare loop (the hash-model executor, no shadow KV, no
    checks), as replay_speed.py builds them; not run yet. `num_gpu_blocks`: the
    deployment's pool where None."""
    config = LLAMA3_8B_H100.engine_config(
        args.block_size, block_manager="hashed", num_gpu_blocks=num_gpu_blocks
    )
    requests = iter_trace(args.trace, "mooncake", max_requests=args.max_requests)
    executor = "symbolic" if check_invariants else "hash"
    options = SimOptions(check_invariants=check_invariants, executor=executor)
    return Simulation(requests, "reference", config, options, LLAMA3_8B_H100.cost_model())


# a warm-up replay: this many of the trace's first requests through a pool this small, so
# that evictions and prefix hits come within seconds (their kernels compile then)
WARMUP_REQUESTS, WARMUP_NUM_BLOCKS = 30, 2048


def warm_up(args: argparse.Namespace, check_invariants: bool = True) -> None:
    """Replay WARMUP_REQUESTS requests through WARMUP_NUM_BLOCKS blocks, untimed: a fresh
    tree compiles its kernels here (numba keeps them on disk), not in the timed replay."""
    warmup = argparse.Namespace(**{**vars(args), "max_requests": WARMUP_REQUESTS})
    window_simulation(warmup, check_invariants, WARMUP_NUM_BLOCKS).run()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    bare = args.bare
    warm_up(args, check_invariants=not bare)  # untimed: the kernels compile or load here
    phases = Phases()
    original_metadata = loop_module.step_metadata
    loop_module.step_metadata = phases.wrap("runner metadata", original_metadata)
    saved = patch_inside(phases) if getattr(args, "inside", False) else []
    try:
        sim = window_simulation(args, check_invariants=not bare)
        patch_phases(phases, sim, bare)
        kinds = StepKinds(phases) if args.by_kind else None  # else no cost added a step
        if kinds is not None:
            sim.engine.schedule = kinds.wrap_schedule(sim.engine.schedule)
        cpu0 = time.process_time()
        result = sim.run()
        if kinds is not None:
            kinds.close()
        cpu_s = time.process_time() - cpu0
    finally:
        loop_module.step_metadata = original_metadata
        unpatch(saved)
    assert not result.violations, [v.headline() for v in result.violations[:3]]
    steps = max(result.steps, 1)
    per = {name: 1e6 * s / steps for name, s in phases.cpu_s.items()}
    per_step = {name: us for name, us in per.items() if name not in phases.inside}
    per_step[REST] = 1e6 * (cpu_s - phases.phases_s(phases.cpu_s)) / steps
    per_step["total"] = 1e6 * cpu_s / steps
    per_step.update((name, us) for name, us in per.items() if name in phases.inside)
    report = {
        "requests": result.requests,
        "steps": result.steps,
        "sim_time_s": result.sim_time_s,
        "cpu_time_s": cpu_s,
        "us_per_step": per_step,
        "fingerprint": result.fingerprint,
        "load_average": os.getloadavg(),
    }
    if kinds is not None:
        report["us_per_step_by_kind"] = kinds.us_per_step()
    return report


def patch_phases(phases: Phases, sim: Simulation, bare: bool) -> None:
    """The loop's phases timed by `phases` (on this simulation's objects)."""
    engine, checks = sim.engine, sim.checks
    phases.patch(engine, "schedule", "engine schedule()")
    phases.patch(engine, "update_from_output", "engine update_from_output()")
    phases.patch(engine, "add_request", "engine add_request()")
    executor_phase = "hash executor" if bare else "symbolic executor (shadow KV)"
    phases.patch(sim.executor.run, "execute", executor_phase)
    phases.patch(checks, "_check_pool", "block-pool check (incremental)")
    phases.patch(sim.fingerprint, "update", "fingerprint")
    phases.patch(checks.accounting, "check_step", "accounting")
    phases.patch(checks.accounting, "check_agreement", "accounting")
    phases.patch(checks.protocol, "check_output", "protocol")
    phases.patch(checks.protocol, "check_finished", "protocol")
    phases.patch(sim.ledger, "remember", "ledger (remember, gain, retire)")
    phases.patch(sim.ledger, "gain_all", "ledger (remember, gain, retire)")
    phases.patch(sim.ledger, "retire", "ledger (remember, gain, retire)")
    phases.patch(sim.coverage, "observe_step", "coverage")


def window_parser(doc: str) -> argparse.ArgumentParser:
    """The options of a benchmark on a window of the Mooncake trace (`doc`: its
    docstring): --trace, --max-requests, --block-size, --json."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--max-requests", type=int, default=1000)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    return parser


def main() -> int:
    parser = window_parser(__doc__)
    parser.add_argument("--bare", action="store_true", help="the bare loop: no checks")
    parser.add_argument(
        "--by-kind", action="store_true", help="each phase in decode and in prefill steps too"
    )
    parser.add_argument(
        "--inside",
        action="store_true",
        help="also the parts of the pool check and the shadow KV (INSIDE_PARTS), after the "
        "total; their timers add to the phases they run in",
    )
    args = parser.parse_args()
    report = measure(args)
    if args.json:
        return print_json(report)
    print(
        f"{report['requests']} requests, {report['steps']} steps, "
        f"{report['sim_time_s']:.0f} s simulated, {report['cpu_time_s']:.1f} s CPU"
    )
    by_kind = report.get("us_per_step_by_kind")
    if by_kind is not None:
        counts = ", ".join(f"{k} {by_kind[k]['steps']}" for k in STEP_KINDS)
        header = f"(us a step; steps: {counts})"
        print(f"  {header:40s} {'all':>8s} {'decode':>8s} {'prefill':>8s}")
    for name, us in report["us_per_step"].items():
        if by_kind is None:
            print(f"  {name:40s} {us:8.1f} us/step")
        else:
            split = "".join(f" {by_kind[k].get(name, 0.0):8.1f}" for k in STEP_KINDS)
            print(f"  {name:40s} {us:8.1f}{split}")
    print(load_average_line(report["load_average"]))
    return 0


def print_json(report: dict[str, Any]) -> int:
    """The report as indented JSON on stdout (`--json`); the exit status."""
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


def load_average_line(load: tuple[float, ...]) -> str:
    """The load average beside a table of CPU times (this machine's noise is in both)."""
    return "load average " + ", ".join(f"{x:.2f}" for x in load)


if __name__ == "__main__":
    sys.exit(main())
