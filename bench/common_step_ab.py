#!/usr/bin/env python3
"""The shadow KV's common step in one call against the phase-by-phase path, side by side.

The window of the Mooncake conversation trace replays through the reference engine with
every invariant, alternately with the common step (sim/step_kernel.py) and without it
(`SymbolicExecutor.use_common_step = False`), `--rounds` times each, in one process: the
order alternates round by round, so a drift of the machine's load falls on both sides.
Reported: the executor's CPU time a step (all steps, decode steps, the other steps), each side's
median, their ratio, and the fingerprints, which must be equal (the common step changes
nothing a run reports).

    python bench/common_step_ab.py --max-requests 1000 --rounds 2
    python bench/common_step_ab.py --max-requests 300 --rounds 3 --json

Not a test: numbers to read beside each other, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from replay_phases import TRACE as TRACE  # the window (the tests read it here)
from replay_phases import load_average_line, print_json, window_parser, window_simulation

SIDES = ("common step", "phase by phase")
KEYS = ("executor_us_per_step", "executor_us_per_decode_step", "executor_us_per_other_step")


def run_once(args: argparse.Namespace, common_step: bool) -> dict[str, Any]:
    """One replay of the window; the executor's CPU time on every step and on decode steps
    (at most two rows a request: a decode, or a decode and a draft)."""
    sim = window_simulation(args)
    executor = sim.executor.run
    executor.use_common_step = common_step
    execute = executor.execute
    cpu_ns = {"all": 0, "decode": 0}
    num_decode_steps = 0

    def timed(meta):
        nonlocal num_decode_steps
        t0 = time.process_time_ns()
        try:
            return execute(meta)
        finally:
            spent_ns = time.process_time_ns() - t0
            cpu_ns["all"] += spent_ns
            if meta.num_tokens <= 2 * meta.num_reqs:
                cpu_ns["decode"] += spent_ns
                num_decode_steps += 1

    executor.execute = timed
    result = sim.run()
    assert not result.violations, [v.headline() for v in result.violations[:3]]
    return {
        "steps": result.steps,
        "decode_steps": num_decode_steps,
        "executor_us_per_step": cpu_ns["all"] / 1e3 / max(result.steps, 1),
        "executor_us_per_decode_step": cpu_ns["decode"] / 1e3 / max(num_decode_steps, 1),
        "executor_us_per_other_step": (cpu_ns["all"] - cpu_ns["decode"])
        / 1e3
        / max(result.steps - num_decode_steps, 1),
        "fingerprint": result.fingerprint,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """`args.rounds` runs a side, alternating (common step first in even rounds)."""
    assert args.rounds >= 1
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for r in range(args.rounds):  # bounded: --rounds
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        for side in order:  # bounded: two sides
            runs[side].append(run_once(args, side == SIDES[0]))
    fingerprints = {run["fingerprint"] for side in SIDES for run in runs[side]}
    assert len(fingerprints) == 1, f"the two paths reported differently: {fingerprints}"
    report: dict[str, Any] = {"requests": args.max_requests, "rounds": args.rounds}
    for key in KEYS:
        medians = {side: statistics.median(run[key] for run in runs[side]) for side in SIDES}
        report[key] = {side: [round(run[key], 1) for run in runs[side]] for side in SIDES}
        report[f"{key}_ratio"] = medians[SIDES[0]] / medians[SIDES[1]]
    report["steps"] = runs[SIDES[0]][0]["steps"]
    report["fingerprint"] = fingerprints.pop()
    report["load_average"] = os.getloadavg()
    return report


def main() -> int:
    parser = window_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    report = measure(args)
    if args.json:
        return print_json(report)
    print(f"{report['requests']} requests, {report['steps']} steps, fingerprint "
          f"{report['fingerprint'][:8]} on every run")  # fmt: skip
    for key, what in zip(KEYS, ("every step", "decode steps", "other steps"), strict=True):
        runs = report[key]
        print(f"  the executor, {what} (us a step): common step {runs[SIDES[0]]}, "
              f"phase by phase {runs[SIDES[1]]}: ratio {report[key + '_ratio']:.3f}")  # fmt: skip
    print(load_average_line(report["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
