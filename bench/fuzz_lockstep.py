#!/usr/bin/env python3
"""Goal (d) side by side, in lockstep: two versions of schedcheck fuzz in turns.

`fuzz_speed.py` run once per version, one after the other, moves by 10-20 % between runs
on these machines, as much as a change it is meant to show. Here each version runs in a
process of its own (bench/lockstep.py: the base first on its PYTHONPATH, a git worktree of
`--base-commit` or `--base-path`; the head as installed), and only one runs at a time:

    turn:   0           1           2           3      ...
            base, head  head, base  base, head  head, base

In turn t each side runs one campaign of `--examples-per-turn` examples from the same seed
(one worker, in its process, as fuzz_speed.py runs it; whole rounds of 32, so the count is
rounded up to a multiple of 32) and reports its CPU time
(`process_time`). So both sides fuzz the same seeds, each turn within a second of the
other. The processes' setup (imports, the engine's first build, the compiled kernels) and
`--warmup-turns` turns are not counted: the figures are examples per warm CPU second.
Reported: each side's examples (and how many of them its workers answered from memory,
fuzz/verdict_memo.py: a scenario drawn again; none before bafca42, and turns of 64
examples repeat fewer than a long campaign, whose rounds all start from one scenario)
and CPU time, the head's examples per CPU second over the
base's (goal: >= 2x the commit issue 30 was filed on), and the median and quartiles of the
turns' own ratios.

    python bench/fuzz_lockstep.py --base-commit 2a03002 --turns 20
    .tox/vllm-v1/bin/python bench/fuzz_lockstep.py --base-commit 2a03002 --engine vllm-v1 \\
        --ignore engine-crash --ignore liveness --ignore block-pool.cached-unwritten

Not a test: numbers to read beside each other, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
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

# -- one side: a child process -----------------------------------------------------------------


def start_side(name: str, path: Path | None, args: argparse.Namespace) -> Child:
    """A child process fuzzing with one version (`path` first on its PYTHONPATH)."""
    command = [sys.executable, __file__, "--child", "--engine", args.engine]
    command += ["--examples-per-turn", str(args.examples_per_turn)]
    for kind in args.ignore:
        command += ["--ignore", kind]
    return Child(name, command, path)


def child(args: argparse.Namespace) -> int:
    """A side's process: set up, then one campaign a line of stdin (its seed)."""
    from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
    from schedcheck.fuzz.swarm import SwarmSpec

    def campaign(seed: int, examples: int, out: str) -> Any:
        spec = SwarmSpec(engine=args.engine, ignore=tuple(args.ignore))
        options = CampaignOptions(spec=spec, seed=seed, workers=1, budget_s=1e6,
                                  examples_max=examples, out_dir=out, db_dir=None)  # fmt: skip
        return run_campaign(options)

    with tempfile.TemporaryDirectory() as out:
        cpu0 = time.process_time()
        campaign(0, 1, out)  # imports, the engine's first build, the kernels
        reply({"setup_cpu_s": time.process_time() - cpu0, **where_imported()})
        for line in sys.stdin:  # bounded: the parent's turns
            cpu0 = time.process_time()
            result = campaign(int(line), args.examples_per_turn, out)
            assert result.finding is None, f"a finding: {result.finding}"
            repeated = getattr(result, "repeats", 0)  # judged from memory (none before it)
            reply({"cpu_s": time.process_time() - cpu0, "examples": result.examples,
                   "repeated": repeated})  # fmt: skip
    return 0


# -- the parent ----------------------------------------------------------------------------------


def measure(args: argparse.Namespace, base_path: Path) -> dict[str, Any]:
    """Both sides in turns; their totals and ratios."""
    sides = [start_side("base", base_path, args), start_side("head", None, args)]
    turns: list[list[dict[str, Any]]] = [[], []]
    try:
        for t in range(-args.warmup_turns, args.turns):  # bounded: --turns
            for s in turn_order(t):
                answer = sides[s].ask(str(1000 + t))  # the turn's seed, the same on both
                if t >= 0:
                    turns[s].append(answer)
    finally:
        for side in sides:
            side.close()
    return report(args, sides, turns)


def report(
    args: argparse.Namespace, sides: list[Child], turns: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    rates = [[t["examples"] / t["cpu_s"] for t in side] for side in turns]
    per_turn = [h / b for b, h in zip(*rates, strict=True)]
    out: dict[str, Any] = {"engine": args.engine, "turns": args.turns,
                           "examples_per_turn": args.examples_per_turn}  # fmt: skip
    for name, side, done in zip(SIDES, sides, turns, strict=True):
        examples, cpu_s = sum(t["examples"] for t in done), sum(t["cpu_s"] for t in done)
        out[name] = {"examples": examples, "cpu_s": cpu_s, "examples_per_cpu_s": examples / cpu_s,
                     "repeated": sum(t.get("repeated", 0) for t in done), **side.ready}  # fmt: skip
    out["speedup"] = out["head"]["examples_per_cpu_s"] / out["base"]["examples_per_cpu_s"]
    out["turn_speedup_median"], out["turn_speedup_quartiles"] = spread(per_turn)
    out["load_average"] = os.getloadavg()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_base_arguments(parser)
    parser.add_argument("--engine", default="reference", help="the engine fuzzed (e.g. vllm-v1)")
    parser.add_argument("--ignore", action="append", default=[], help="an invariant's kind")
    parser.add_argument("--turns", type=int, default=20, help="counted turns (default 20)")
    parser.add_argument("--warmup-turns", type=int, default=1, help="turns not counted")
    parser.add_argument(
        "--examples-per-turn", type=int, default=64, help="a campaign a turn (whole rounds of 32)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    check_base(parser, args)
    if min(args.turns, args.examples_per_turn) < 1 or args.warmup_turns < 0:
        parser.error("--turns and --examples-per-turn must be >= 1, --warmup-turns >= 0")
    return args


def main() -> int:
    args = parse_args()
    if args.child:
        return child(args)
    out = measured(args, measure, "speedup")
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    lo, hi = out["turn_speedup_quartiles"]
    for name in SIDES:
        side = out[name]
        print(f"{name}: {side['examples']} examples ({side['repeated']} judged from memory) in "
              f"{side['cpu_s']:.2f} s CPU: "
              f"{side['examples_per_cpu_s']:.1f} a CPU second ({side['schedcheck']})")  # fmt: skip
    print(f"head / base: {out['speedup']:.3f}x (goal >= 2x the filed commit); the turns' "
          f"ratios: median {out['turn_speedup_median']:.3f}x, quartiles {lo:.3f}-{hi:.3f}x "
          f"({out['turns']} turns of {out['examples_per_turn']} examples)")  # fmt: skip
    repeats = repeats_line(out, "speedup")
    if repeats is not None:
        print(repeats)
    print("load average " + ", ".join(f"{x:.2f}" for x in out["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
