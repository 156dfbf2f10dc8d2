#!/usr/bin/env python3
"""Fuzz examples per CPU second on an engine that stays clean (the reference engine; for a
vLLM release, `--ignore` the kinds of its known bugs): one worker in this process
(the examples a seed draws are the same on every run of the same code), for `--budget-s`
seconds of wall time (or exactly `--examples` examples: the same work on both sides of a
comparison), counted by the campaign and divided by this process's CPU time.

    python bench/fuzz_speed.py --budget-s 60 --json
    .tox/vllm-v1/bin/python bench/fuzz_speed.py --engine vllm-v1 --examples 320 --json \
        --ignore engine-crash --ignore liveness --ignore block-pool.cached-unwritten

To compare two commits, run this same file with each installed copy one after the other
(see docs/performance.md): examples per CPU second, each with its load average.

`examples_per_cpu_s` counts the whole campaign, its one-time setup included (for vllm-v1
importing torch and vLLM, 4-5 s: about half of 320 examples' CPU; for the reference engine
loading the compiled kernels of the shadow KV and the hash memory, about 0.3 s);
`setup_cpu_s` is that setup (a campaign of one example first: the engine imported and
built, the kernels loaded), and
`examples_per_warm_cpu_s` the examples per CPU second after it: what a campaign of
minutes runs at.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.swarm import SwarmSpec


def measure(
    budget_s: float,
    seed: int,
    examples: int | None,
    engine: str = "reference",
    ignore: tuple[str, ...] = (),
) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as out:
        options = CampaignOptions(
            spec=SwarmSpec(engine=engine, ignore=ignore),
            seed=seed,
            workers=1,
            budget_s=budget_s if examples is None else 1e6,
            examples_max=examples,
            out_dir=out,
            db_dir=None,
        )
        cpu0, wall0 = time.process_time(), time.perf_counter()
        # the campaign's one-time setup (import, build the engine once; one example loads
        # the checks' compiled kernels, which no campaign of no examples touches), by its
        # own code
        run_campaign(dataclasses.replace(options, examples_max=1))
        setup_cpu_s = time.process_time() - cpu0
        cpu1 = time.process_time()
        result = run_campaign(options)
        warm_cpu_s = time.process_time() - cpu1
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    assert not result.found and not result.errors, (result.finding, result.errors)
    return {
        "engine": engine,
        "examples": result.examples,
        "cpu_s": round(cpu_s, 2),
        "wall_s": round(wall_s, 2),
        "examples_per_cpu_s": round(result.examples / cpu_s, 3),
        "setup_cpu_s": round(setup_cpu_s, 2),
        "examples_per_warm_cpu_s": round(result.examples / warm_cpu_s, 3),
        "load_average": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--examples", type=int, default=None, help="run exactly this many (not a budget)"
    )
    parser.add_argument("--engine", default="reference", help="the engine fuzzed (e.g. vllm-v1)")
    parser.add_argument(
        "--ignore", action="append", default=[], help="an invariant not to stop at (repeatable)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.budget_s, args.seed, args.examples, args.engine, tuple(args.ignore))
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(
            f"{report['examples']} examples in {report['cpu_s']} s CPU "
            f"({report['examples_per_cpu_s']} per CPU second); load {report['load_average']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
