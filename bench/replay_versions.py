#!/usr/bin/env python3
"""A change to the replay path, measured: two versions replay the window in lockstep.

The base (`--base-commit REV`, a git worktree; or `--base-path DIR`) and the head (the
schedcheck installed) each replay the same window in a process of their own, every
invariant checked (`--side bare`: the bare loop), and take turns every `--slice-s`
simulated seconds, as bench/replay_lockstep.py's checked and bare runs do in one process
(bench/lockstep.py: one process runs at a time, the order alternating turn by turn). Where
the change keeps the schedule, both make the same steps at the same simulated times (equal
fingerprints, reported), so slice k is the same work on both sides. Reported: each side's
CPU time (`process_time`), the head's over the base's (below 1: the head is faster), and
the median and quartiles of the slices' own ratios.

    python bench/replay_versions.py --base-commit HEAD~1 --max-requests 1000
    python bench/replay_versions.py --base-commit main --side bare --json

Not a test: numbers to read beside each other, with the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from lockstep import (
    SIDES,
    Child,
    add_base_arguments,
    check_base,
    measured,
    repeats_line,
    reply,
    spread,
    turn_order,
    where_imported,
)
from replay_lockstep import run_in_slices
from replay_phases import (
    load_average_line,
    print_json,
    warm_up,
    window_parser,
    window_simulation,
)


def child(args: argparse.Namespace) -> int:
    """A side's process: the window's replay, one slice a line of stdin (after replay_phases'
    warm-up, not timed: the compiled kernels load or compile; 3 requests through the
    deployment's pool left those of evictions and prefix hits to compile in the timed
    replay, and a base checked out afresh read 0.90x of itself)."""
    check = args.side == "checked"
    warm_up(args, check)
    sim = window_simulation(args, check)

    def next_turn(slice_cpu_s: float) -> None:
        reply({"cpu_s": slice_cpu_s})
        if not sys.stdin.readline():  # the parent is gone
            raise SystemExit(1)

    reply(where_imported())
    sys.stdin.readline()  # the first turn
    result, cpu_s = run_in_slices(sim, args.slice_s, time.process_time, next_turn)
    assert not result.violations, [v.headline() for v in result.violations[:3]]
    reply({"cpu_s": cpu_s, "done": True, "fingerprint": result.fingerprint,
           "steps": result.steps})  # fmt: skip
    return 0


def measure(args: argparse.Namespace, base_path: Path) -> dict[str, Any]:
    """Both versions in turns, a slice each, until both ran to the end."""
    command = [sys.executable, __file__, "--child", "--side", args.side, "--trace", args.trace,
               "--max-requests", str(args.max_requests), "--block-size", str(args.block_size),
               "--slice-s", str(args.slice_s)]  # fmt: skip
    sides = [Child("base", command, base_path), Child("head", command, None)]
    cpu_s: list[list[float]] = [[], []]
    ends: list[dict[str, Any] | None] = [None, None]
    try:
        turn = 0
        while None in ends:  # bounded: each turn runs a slice of each side not done
            for s in turn_order(turn):
                if ends[s] is None:
                    answer = sides[s].ask("go")
                    cpu_s[s].append(answer["cpu_s"])
                    ends[s] = answer if answer.get("done") else None
            turn += 1
    finally:
        for side in sides:
            side.close()
    return report(args, sides, cpu_s, [end for end in ends if end is not None])


def report(
    args: argparse.Namespace,
    sides: list[Child],
    cpu_s: list[list[float]],
    ends: list[dict[str, Any]],
) -> dict[str, Any]:
    totals = [sum(side) for side in cpu_s]
    pairs = zip(*cpu_s, strict=False)  # the slices both ran (all, where the schedule held)
    median, quartiles = spread([h / b for b, h in pairs if b >= args.min_slice_cpu_s])
    out: dict[str, Any] = {"requests": args.max_requests, "side": args.side,
                           "slice_s": args.slice_s}  # fmt: skip
    for name, side, total, slices, end in zip(SIDES, sides, totals, cpu_s, ends, strict=True):
        out[name] = {"cpu_s": total, "slices": len(slices), "steps": end["steps"],
                     "fingerprint": end["fingerprint"], **side.ready}  # fmt: skip
    out["same_schedule"] = ends[0]["fingerprint"] == ends[1]["fingerprint"]
    out["cpu_ratio"] = totals[1] / totals[0]  # head over base: below 1, the head is faster
    out["slice_ratio_median"], out["slice_ratio_quartiles"] = median, quartiles
    out["load_average"] = os.getloadavg()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = window_parser(__doc__)
    add_base_arguments(parser)
    parser.add_argument("--side", choices=("checked", "bare"), default="checked")
    parser.add_argument("--slice-s", type=float, default=10.0, help="simulated seconds a turn")
    parser.add_argument(
        "--min-slice-cpu-s",
        type=float,
        default=0.005,
        help="slices whose base took less CPU are left out of the slice ratios",
    )
    args = parser.parse_args(argv)
    check_base(parser, args)
    if args.slice_s <= 0 or args.max_requests < 1:
        parser.error("--slice-s must be > 0 and --max-requests >= 1")
    return args


def main() -> int:
    args = parse_args()
    if args.child:
        return child(args)
    out = measured(args, measure, "cpu_ratio")
    if args.json:
        return print_json(out)
    for name in SIDES:
        side = out[name]
        print(f"{name}: {side['cpu_s']:.2f} s CPU, {side['steps']} steps in {side['slices']} "
              f"slices, fingerprint {side['fingerprint'][:8]} ({side['schedcheck']})")  # fmt: skip
    lo, hi = out["slice_ratio_quartiles"]
    same = "the same schedule" if out["same_schedule"] else "DIFFERENT schedules"
    median = out["slice_ratio_median"]
    print(
        f"head / base CPU ({out['side']}): {out['cpu_ratio']:.3f}x, {same}; the slices' "
        f"ratios: median {median:.3f}x, quartiles {lo:.3f}-{hi:.3f}x"
    )
    repeats = repeats_line(out, "cpu_ratio")
    if repeats is not None:
        print(repeats)
    print(load_average_line(out["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
