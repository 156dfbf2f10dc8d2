#!/usr/bin/env python3
"""Where a fuzz example's CPU time goes, sampled by py-spy: no timer in the run.

`fuzz_phases.py` wraps each phase with a CPU timer: some forty timer calls a step, which
add about a third to an example (7.3 against 5.4 ms on the reference engine), more to
the small phases they wrap than to the large. Here a child process fuzzes the campaign of
`fuzz_speed.py` with no code changed while py-spy samples its stacks. The child first
runs a campaign of 64 examples from another seed (imports, compiled kernels), whose
samples do not count. Each sample of the measured campaign goes to the first phase of
PHASES that one of its frames names:

    construction                 Simulation.__init__ (the engine's build included)
    engine schedule() / ...      the engine method `call_engine` calls
    shadow KV, runner metadata, block-pool check, output checks, ledger, fingerprint,
    protocol, accounting, coverage, drafter
    the rest of a simulation     any other frame under Simulation.run (SimPy, the loop)
    drawing the scenarios        the scenario strategy (Hypothesis' draws included)
    Hypothesis' engine, the campaign   the rest

    python bench/fuzz_sampled.py --examples 2560
    .tox/vllm-v1/bin/python bench/fuzz_sampled.py --engine vllm-v1 --ignore engine-crash \\
        --ignore liveness --ignore block-pool.cached-unwritten --json

Needs py-spy (`pip install 'schedcheck[profile]'`), which reads the child's memory
(ptrace) and pauses it to take each sample: the campaign runs some 40 % slower sampled, so
only the shares are reported. Not a test: shares to read beside each other, with the load
average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from replay_phases import load_average_line, print_json

MEASURED = "measured_campaign"  # the frame of the campaign whose samples count
WARM_UP_EXAMPLES = 64
SIMULATION = "the rest of a simulation (SimPy, the loop, ...)"
DRAWING = "drawing the scenarios (Hypothesis' draws included)"
OUTSIDE = "Hypothesis' engine, the campaign"
# (phase, the function names that put a sample in it), first match wins
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("construction", ("Simulation.__init__",)),
    ("shadow KV", ("SymbolicExecutor.execute",)),
    ("runner metadata", ("step_metadata",)),
    ("block-pool check", ("StepChecks._check_pool",)),
    ("output checks", ("StepChecks._check_outputs", "StepChecks.idle", "StepChecks.at_end")),
    ("ledger", ("Ledger.remember", "Ledger.gain_all", "Ledger.retire", "Ledger.admit")),
    ("fingerprint", ("Fingerprint.update",)),
    ("protocol", ("StepChecks.check_output", "ProtocolChecker.check_finished")),
    ("accounting", ("AccountingChecker.check_step", "AccountingChecker.check_agreement")),
    ("coverage", ("Coverage.observe_step",)),
    ("drafter", ("Speculation.propose", "Speculation.gained", "Speculation.roll_back_rejected")),
    (SIMULATION, ("Simulation.run",)),
    (DRAWING, ("_scenarios",)),
)
ENGINE_CALL = "call_engine"  # sim/result.py: the loop's every call into the engine


def phase_of(function_names: list[str]) -> str:
    """The phase of one sample, its stack's function names outermost first: an engine
    method (the frame below `call_engine`) counts as the engine's, else the first phase
    of PHASES one of its frames names, else OUTSIDE."""
    names = set(function_names)
    if "Simulation.__init__" not in names and ENGINE_CALL in names:
        below = function_names.index(ENGINE_CALL) + 1
        if below < len(function_names):
            return f"engine {function_names[below].rpartition('.')[2]}()"
    for phase, functions in PHASES:  # bounded: the table
        if not names.isdisjoint(functions):
            return phase
    return OUTSIDE


def aggregate(raw_lines: Iterable[str]) -> Counter[str]:
    """Samples per phase, from py-spy's raw output (a line: `frame;frame;... count`, each
    frame `function (file:line)`); only samples of the measured campaign count."""
    samples: Counter[str] = Counter()
    for line in raw_lines:  # bounded: the file
        stack, _, count = line.rstrip("\n").rpartition(" ")
        names = [frame.partition(" (")[0] for frame in stack.split(";")]
        if stack and MEASURED in names:
            samples[phase_of(names)] += int(count)
    return samples


def report(samples: Counter[str], examples: int, cpu_s: float) -> dict[str, Any]:
    """Each phase's share of the campaign's samples. `cpu_s`: the campaign's CPU time
    while sampled, which py-spy's pauses inflate (by some 40 % at 500 samples a second):
    read the shares, and `fuzz_speed.py` for the time an example takes."""
    total = sum(samples.values())
    assert total > 0, "py-spy took no sample of the measured campaign"
    return {
        "examples": examples,
        "samples": total,
        "sampled_cpu_s": cpu_s,
        "shares": {phase: n / total for phase, n in samples.most_common()},
        "load_average": os.getloadavg(),
    }


# -- the child: one warm-up campaign, then the measured one ---------------------------


def measured_campaign(options: Any) -> Any:
    """The campaign whose samples count (its frame marks them)."""
    from schedcheck.fuzz.campaign import run_campaign

    return run_campaign(options)


def child(args: argparse.Namespace) -> int:
    import time

    from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
    from schedcheck.fuzz.swarm import SwarmSpec

    with tempfile.TemporaryDirectory() as out:
        options = CampaignOptions(
            spec=SwarmSpec(engine=args.engine, ignore=tuple(args.ignore)),
            seed=args.seed, workers=1, budget_s=1e6, examples_max=args.examples,
            out_dir=out, db_dir=None,
        )  # fmt: skip
        warm_up = dataclasses.replace(options, seed=args.seed + 1000, examples_max=WARM_UP_EXAMPLES)
        run_campaign(warm_up)
        cpu0 = time.process_time()
        result = measured_campaign(options)
        cpu_s = time.process_time() - cpu0
    assert not result.found and not result.errors, (result.finding, result.errors)
    Path(args.child).write_text(f"{result.examples} {cpu_s}\n", encoding="utf-8")
    return 0


# -- the parent: py-spy over the child ------------------------------------------------


def measure(args: argparse.Namespace, py_spy: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        raw, counts = Path(tmp, "samples.raw"), Path(tmp, "counts")
        command = [py_spy, "record", "-r", str(args.rate), "-f", "raw", "-o", str(raw), "--"]
        command += [sys.executable, __file__, "--child", str(counts), *child_options(args)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not counts.exists():
            raise RuntimeError(f"py-spy or the campaign failed:\n{done.stderr[-2000:]}")
        examples, cpu_s = counts.read_text(encoding="utf-8").split()
        if args.raw:  # kept for a closer look (flame graphs, a phase's own lines)
            shutil.copyfile(raw, args.raw)
        with raw.open(encoding="utf-8") as lines:
            return report(aggregate(lines), int(examples), float(cpu_s))


def child_options(args: argparse.Namespace) -> list[str]:
    options = ["--examples", str(args.examples), "--seed", str(args.seed)]
    options += ["--engine", args.engine]
    for kind in args.ignore:
        options += ["--ignore", kind]
    return options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=1280, help="measured (default 1280)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", default="reference", help="as fuzz_speed.py's --engine")
    parser.add_argument("--ignore", action="append", default=[], help="as fuzz_speed.py's")
    parser.add_argument("--rate", type=int, default=500, help="samples a second (py-spy -r)")
    parser.add_argument("--raw", help="also keep py-spy's raw samples in this file")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # where the child writes counts
    args = parser.parse_args(argv)
    if args.examples < 1 or args.rate < 1:
        parser.error("--examples and --rate must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        print("fuzz_sampled.py: needs py-spy (pip install 'schedcheck[profile]')", file=sys.stderr)
        return 2
    result = measure(args, py_spy)
    if args.json:
        return print_json(result)
    print(f"{result['examples']} examples, {result['samples']} samples "
          f"({result['sampled_cpu_s']:.2f} s CPU while sampled)")  # fmt: skip
    for phase, share in result["shares"].items():
        print(f"  {phase:<56} {100 * share:5.1f} %")
    print(load_average_line(result["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
