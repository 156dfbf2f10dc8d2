#!/usr/bin/env python3
"""Goal (b) in lockstep: the checked run and the bare run take turns, slice by slice.

`replay_speed.py --pairs N` compares whole runs of some ten seconds each, one after the
other. On these machines the same run varies by up to 40 % within the hour, so its ratio
moves by as much as a change it is meant to show. Here both runs replay the same window
(the reference engine, every invariant against the bare loop, as replay_speed.py builds
them) in one process, and they take turns every `--slice-s` simulated seconds:

    checked  |slice 0|       |slice 1|       |slice 2|  ...
    bare             |slice 0|       |slice 1|       |slice 2|  ...

Each run has its own thread, but only the one holding the baton runs: it hands the baton
over when its clock passes the slice's end (checked at each SimPy event). Both runs make
the same steps at the same simulated times (their fingerprints must be equal), so slice k
is the same work on both sides, done within a second of each other. The CPU time of each
slice (`thread_time`) goes to its side. Reported: each side's total CPU time and their
ratio (goal <= 1.3x), and the median and quartiles of the slices' own ratios, which show
how much the machine moved within the run.

    python bench/replay_lockstep.py --max-requests 1000
    python bench/replay_lockstep.py --max-requests 300 --slice-s 5 --json

Not a test: numbers to read beside each other, with the load average.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from lockstep import spread
from replay_phases import TRACE as TRACE  # the window (the tests read it here)
from replay_phases import (
    load_average_line,
    print_json,
    warm_up,
    window_parser,
    window_simulation,
)

from schedcheck.sim.loop import RunResult, Simulation

SIDES = ("checked", "bare")  # side 0 holds the baton first
TURN_WAIT_MAX_S = 600.0  # a side waits this long for its turn at most (else: a deadlock)


class Baton:
    """Which side may run. A side that finished never takes it again."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._turn = 0
        self._done = [False, False]
        self.turns: list[int] = []  # the side of each turn taken, in order

    def take(self, side: int) -> None:
        with self._cond:
            mine = self._cond.wait_for(lambda: self._turn == side, timeout=TURN_WAIT_MAX_S)
            assert mine, f"side {side} waited {TURN_WAIT_MAX_S:g} s for its turn"
            self.turns.append(side)

    def hand_over(self, side: int, done: bool = False) -> None:
        with self._cond:
            self._done[side] = done
            other = 1 - side
            self._turn = other if not self._done[other] else side
            self._cond.notify_all()


def slice_end_s(now_s: float, slice_s: float) -> float:
    """The end of the slice an event at `now_s` falls in: the first multiple of `slice_s`
    at or above it (slices no event falls in are skipped on both sides alike)."""
    return slice_s * max(1, math.ceil(now_s / slice_s))


def run_in_slices(
    sim: Simulation, slice_s: float, clock: Callable[[], float], slice_done: Callable[[float], None]
) -> tuple[RunResult, float]:
    """`sim.run()`, pausing after each slice of `slice_s` simulated seconds (checked at
    every SimPy event) to call `slice_done` with the slice's time by `clock`; it returns
    when the run may go on. Returns (the result, the last slice's time)."""
    env, step = sim.env, sim.env.step
    end = [slice_s]
    started = [clock()]

    def stepping() -> None:  # every SimPy event of the run passes here
        due = env.peek()  # inf: no event left (step() raises what SimPy's run() expects)
        if end[0] < due < math.inf:
            slice_done(clock() - started[0])
            end[0] = slice_end_s(due, slice_s)
            started[0] = clock()
        step()

    env.step = stepping  # type: ignore[method-assign]  # SimPy's run() calls self.step()
    result = sim.run()
    return result, clock() - started[0]


def run_side(
    side: int, sim: Simulation, slice_s: float, baton: Baton, cpu_s: list[float]
) -> dict[str, Any]:
    """Run `sim` in turns with the other side: each slice's CPU time is appended to
    `cpu_s`; the result's figures are returned."""

    def hand_over(slice_cpu_s: float) -> None:
        cpu_s.append(slice_cpu_s)
        baton.hand_over(side)
        baton.take(side)

    baton.take(side)
    try:
        result, last_cpu_s = run_in_slices(sim, slice_s, time.thread_time, hand_over)
        cpu_s.append(last_cpu_s)
    finally:
        baton.hand_over(side, done=True)
    assert not result.violations, [v.headline() for v in result.violations[:3]]
    return {"fingerprint": result.fingerprint, "steps": result.steps}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Both sides in lockstep (after replay_phases' warm-up of each, untimed); their
    totals, ratio and per-slice ratios."""
    warm_up(args, True)
    warm_up(args, False)
    sims = [window_simulation(args, True), window_simulation(args, False)]
    baton = Baton()
    cpu_s: list[list[float]] = [[], []]
    out: list[dict[str, Any]] = [{}, {}]
    errors: list[BaseException] = []

    def target(side: int) -> Callable[[], None]:
        def go() -> None:
            try:
                out[side] = run_side(side, sims[side], args.slice_s, baton, cpu_s[side])
            except BaseException as exc:  # re-raised in the main thread below
                errors.append(exc)
                baton.hand_over(side, done=True)

        return go

    threads = [threading.Thread(target=target(side)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    assert out[0]["fingerprint"] == out[1]["fingerprint"], "the checks changed the schedule"
    assert len(cpu_s[0]) == len(cpu_s[1]), "both sides ran the same slices"
    return report(args, out[0], cpu_s, baton.turns)


def report(
    args: argparse.Namespace, result: dict[str, Any], cpu_s: list[list[float]], turns: list[int]
) -> dict[str, Any]:
    totals = [sum(side) for side in cpu_s]
    ratios = [c / b for c, b in zip(*cpu_s, strict=True) if b >= args.min_slice_cpu_s]
    median, quartiles = spread(ratios)
    return {
        "requests": args.max_requests,
        "steps": result["steps"],
        "fingerprint": result["fingerprint"],
        "slice_s": args.slice_s,
        "slices": len(cpu_s[0]),
        "turns": len(turns),
        **{f"{name}_cpu_s": total for name, total in zip(SIDES, totals, strict=True)},
        "invariant_overhead": totals[0] / totals[1],
        "slice_ratio_median": median,
        "slice_ratio_quartiles": quartiles,
        "slices_compared": len(ratios),
        "load_average": os.getloadavg(),
    }


def main() -> int:
    parser = window_parser(__doc__)
    parser.add_argument(
        "--slice-s", type=float, default=10.0, help="simulated seconds a turn (default 10)"
    )
    parser.add_argument(
        "--min-slice-cpu-s",
        type=float,
        default=0.005,
        help="slices whose bare side took less CPU are left out of the slice ratios",
    )
    args = parser.parse_args()
    if args.slice_s <= 0 or args.max_requests < 1:
        parser.error("--slice-s must be > 0 and --max-requests >= 1")
    report = measure(args)
    if args.json:
        return print_json(report)
    lo, hi = report["slice_ratio_quartiles"]
    print(
        f"{report['requests']} requests, {report['steps']} steps, {report['slices']} slices of "
        f"{report['slice_s']:g} simulated s, taken in turns; fingerprint "
        f"{report['fingerprint'][:8]} on both sides"
    )
    print(
        f"checked {report['checked_cpu_s']:.2f} s CPU, bare {report['bare_cpu_s']:.2f} s: "
        f"invariant overhead {report['invariant_overhead']:.3f}x (goal <= 1.3x); the slices' "
        f"ratios: median {report['slice_ratio_median']:.3f}x, quartiles {lo:.3f}-{hi:.3f}x "
        f"({report['slices_compared']} slices)"
    )
    print(load_average_line(report["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
