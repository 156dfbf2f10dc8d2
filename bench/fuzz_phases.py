#!/usr/bin/env python3
"""Where a fuzz example's CPU time goes: the campaign of `fuzz_speed.py` (one worker, the
same seed, so both sides of a comparison run the same examples), each phase of every
simulation wrapped with `process_time` as `replay_phases.py` wraps them.

    python bench/fuzz_phases.py --examples 640
    python bench/fuzz_phases.py --examples 640 --json
    .tox/vllm-v1/bin/python bench/fuzz_phases.py --engine vllm-v1 --examples 320 \
        --ignore engine-crash --ignore liveness --ignore block-pool.cached-unwritten

Phases, in us per example and per step: the simulation's construction (engine, executor,
checks), the engine's schedule() / update_from_output() / add_request(), the shadow KV,
the block-pool check, the runner metadata, the fingerprint, the accounting and protocol
checks, the ledger, coverage; the rest of a simulation (SimPy, arrivals, the loop, the
drafter, the checks at a request's finish and the run's end); drawing the scenarios (the
scenario strategy's draws, Hypothesis' per-draw work included); and the rest outside the
simulations (Hypothesis generating, mutating and running the examples, the campaign).
The one-time setup (a campaign of one example: imports, compiled kernels) is not counted.
Not a test: numbers to read beside each other, with the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import fuzz_speed
import replay_phases
from hypothesis.strategies._internal.core import CompositeStrategy

import schedcheck.sim.loop as loop_module

DRAWING = "drawing the scenarios (Hypothesis' draws included)"
OUTSIDE = {"construction", DRAWING}  # phases outside a simulation's run


def measure(
    examples: int, seed: int, engine: str = "reference", ignore: tuple[str, ...] = ()
) -> dict[str, Any]:
    phases = replay_phases.Phases()
    totals = {"runs": 0, "steps": 0, "run_cpu_s": 0.0}
    sim_class = loop_module.Simulation
    original = loop_module.step_metadata, sim_class.__init__, sim_class.run
    composite_draw = CompositeStrategy.do_draw  # a scenario is one composite (nested: once)

    def run(sim: loop_module.Simulation) -> Any:
        _wrap_parts(phases, sim)
        cpu0 = time.process_time()
        result = original[2](sim)
        totals["run_cpu_s"] += time.process_time() - cpu0
        totals["runs"] += 1
        totals["steps"] += result.steps
        return result

    fuzz_speed.measure(60.0, seed, 1, engine, ignore)  # the one-time setup, not counted
    loop_module.step_metadata = phases.wrap("runner metadata", original[0])
    sim_class.__init__ = phases.wrap("construction", original[1])  # type: ignore[method-assign]
    sim_class.run = run  # type: ignore[method-assign]
    CompositeStrategy.do_draw = phases.wrap(DRAWING, composite_draw)  # type: ignore[method-assign]
    try:
        cpu0 = time.process_time()
        report = fuzz_speed.measure(60.0, seed, examples, engine, ignore)
        cpu_s = time.process_time() - cpu0
    finally:
        loop_module.step_metadata, sim_class.__init__, sim_class.run = original
        CompositeStrategy.do_draw = composite_draw  # type: ignore[method-assign]
    assert report["examples"] <= totals["runs"], "one simulation an example"
    return _table(phases.cpu_s, totals, cpu_s)


def _wrap_parts(phases: replay_phases.Phases, sim: loop_module.Simulation) -> None:
    """The instance methods `replay_phases.py` times, on this simulation."""
    parts = [
        (sim.engine, "schedule", "engine schedule()"),
        (sim.engine, "update_from_output", "engine update_from_output()"),
        (sim.engine, "add_request", "engine add_request()"),
        (sim.fingerprint, "update", "fingerprint"),
        (sim.ledger, "remember", "ledger"),
        (sim.ledger, "gain_all", "ledger"),
        (sim.ledger, "retire", "ledger"),
        (sim.coverage, "observe_step", "coverage"),
    ]
    if sim.options.check_invariants:
        parts += [
            (sim.executor.run, "execute", "symbolic executor (shadow KV)"),
            (sim.checks, "_check_pool", "block-pool check (incremental)"),
            (sim.checks.accounting, "check_step", "accounting"),
            (sim.checks.accounting, "check_agreement", "accounting"),
            (sim.checks.protocol, "check_output", "protocol"),
            (sim.checks.protocol, "check_finished", "protocol"),
        ]
    for obj, attr, name in parts:  # bounded: the list above
        phases.patch(obj, attr, name)


def _table(cpu_s: dict[str, float], totals: dict[str, Any], all_cpu_s: float) -> dict[str, Any]:
    """Per example (one simulation each: `fuzz_speed.measure`'s own first round of setup
    included, on both sides of a comparison alike) and per step."""
    examples, steps = max(totals["runs"], 1), max(totals["steps"], 1)
    inside = {name: s for name, s in cpu_s.items() if name not in OUTSIDE}
    rows = dict(inside)
    rows["the rest of a simulation (SimPy, arrivals, the loop, ...)"] = totals["run_cpu_s"] - sum(
        inside.values()
    )
    outside = {name: cpu_s.get(name, 0.0) for name in sorted(OUTSIDE)}
    rows.update(outside)
    rows["outside: Hypothesis' engine, the campaign"] = (
        all_cpu_s - totals["run_cpu_s"] - sum(outside.values())
    )
    return {
        "examples": examples,
        "steps": totals["steps"],
        "cpu_s": all_cpu_s,
        "us_per_example": {name: 1e6 * s / examples for name, s in rows.items()},
        "us_per_step": {name: 1e6 * s / steps for name, s in inside.items()},
        "load_average": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=640)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", default="reference", help="as fuzz_speed.py's --engine")
    parser.add_argument("--ignore", action="append", default=[], help="as fuzz_speed.py's")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.examples, args.seed, args.engine, tuple(args.ignore))
    if args.json:
        return replay_phases.print_json(report)
    print(
        f"{report['examples']} examples ({report['steps']} steps), {report['cpu_s']:.2f} s CPU, "
        f"{1e6 * report['cpu_s'] / report['examples']:.0f} us an example"
    )
    for name, us in sorted(report["us_per_example"].items(), key=lambda kv: -kv[1]):
        per_step = report["us_per_step"].get(name)
        step = f"{per_step:7.1f} us/step" if per_step is not None else ""
        print(f"  {name:58s} {us:7.0f} us/example {step}")
    print(replay_phases.load_average_line(report["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
