#!/usr/bin/env python3
"""What a switch is worth on fuzz examples, timed on the part of the run it changes.

Whole campaigns alternated in one process spread 0.9-1.1x a turn on these machines, and
two processes differ by a few percent for their whole lives (`fuzz_lockstep.py`): neither
shows a change of one percent. Here one process fuzzes the same campaign (engine, seeds)
in turns with a switch on and off, the side that goes first alternating turn by turn, and
a CPU timer wraps the part of the run the switch changes (`--part`):

    turn t:   switch on  -> campaign of seed 1000 + t    part's CPU, campaign's CPU
              switch off -> campaign of seed 1000 + t    part's CPU, campaign's CPU

The switch must not change what is drawn, so both sides fuzz the same examples and call
the part equally often (checked). Reported: the part's CPU time on each side and their
ratio; what the switch saves, as a share of the campaign; and the campaigns' own ratio,
with the turns' quartiles (the noise the part's timing leaves out). Compare the same
steps on both sides: a ratio of two selections (say, the steps a new path takes against
those it leaves) measures the selection too.

    python bench/fuzz_part_ab.py --turns 12 \
        --switch schedcheck.sim.symbolic:SymbolicExecutor.use_common_step \
        --part schedcheck.sim.symbolic:SymbolicExecutor.execute
    .tox/vllm-v1/bin/python bench/fuzz_part_ab.py --engine vllm-v1 --ignore engine-crash \
        --ignore liveness --ignore block-pool.cached-unwritten --switch ... --part ... --json

Not a test: numbers to read beside each other, with the load average.
"""

from __future__ import annotations

import argparse
import os
import pkgutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from lockstep import spread, turn_order
from replay_phases import load_average_line, print_json

from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.swarm import SwarmSpec

SIDES = ("on", "off")  # side 0 sets the switch True


def resolve(path: str) -> tuple[Any, str]:
    """'module:Owner.attr' (or 'module:attr') -> (the owner object, 'attr'), by
    `pkgutil.resolve_name`; ValueError where it names none."""
    module_name, colon, dotted = path.partition(":")
    owner_name, _, attr = dotted.rpartition(".")
    if not (module_name and colon and attr):
        raise ValueError(f"{path!r}: give module:Owner.attribute")
    try:
        owner = pkgutil.resolve_name(f"{module_name}:{owner_name}" if owner_name else module_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{path!r}: {exc}") from exc
    if not hasattr(owner, attr):
        raise ValueError(f"{path!r}: {owner!r} has no attribute {attr!r}")
    return owner, attr


class TimedPart:
    """The part's calls and CPU time (ns), counted for the side now running; `restore()`
    puts the part back."""

    def __init__(self, owner: Any, attr: str) -> None:
        self.cpu_ns = [0, 0]
        self.calls = [0, 0]
        self.side = 0
        original = getattr(owner, attr)
        self.restore = lambda: setattr(owner, attr, original)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                self.cpu_ns[self.side] += time.process_time_ns() - t0
                self.calls[self.side] += 1

        setattr(owner, attr, timed)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """`args.turns` campaigns a side, in turns; the part's and the campaigns' CPU. The
    switch and the part are put back as they were."""
    switch_owner, switch_attr = resolve(args.switch)
    switch_before = getattr(switch_owner, switch_attr)
    part = TimedPart(*resolve(args.part))
    try:
        return _measure(args, part, lambda on: setattr(switch_owner, switch_attr, on))
    finally:
        part.restore()
        setattr(switch_owner, switch_attr, switch_before)


def _measure(
    args: argparse.Namespace, part: TimedPart, switch: Callable[[bool], None]
) -> dict[str, Any]:
    spec = SwarmSpec(engine=args.engine, ignore=tuple(args.ignore))
    campaign_s, examples, ratios = [0.0, 0.0], [0, 0], []
    with tempfile.TemporaryDirectory() as out:

        def campaign(seed: int, num_examples: int) -> int:
            options = CampaignOptions(
                spec=spec, seed=seed, workers=1, budget_s=1e6, examples_max=num_examples,
                out_dir=out, db_dir=None,
            )  # fmt: skip
            result = run_campaign(options)
            assert result.finding is None, f"a finding: {result.finding}"
            return result.examples

        for side in (0, 1):  # untimed: imports, the kernels, each side's first build
            switch(side == 0)
            campaign(0, 2)
        part.cpu_ns, part.calls = [0, 0], [0, 0]
        for t in range(args.turns):  # bounded: --turns
            turn_s = [0.0, 0.0]
            for side in turn_order(t):  # bounded: two sides
                switch(side == 0)
                part.side = side
                t0 = time.process_time()
                examples[side] += campaign(1000 + t, args.examples_per_turn)
                turn_s[side] = time.process_time() - t0
                campaign_s[side] += turn_s[side]
            ratios.append(turn_s[1] / turn_s[0] if turn_s[0] else float("nan"))
    assert examples[0] == examples[1], f"the sides fuzzed different examples: {examples}"
    assert part.calls[0] == part.calls[1], f"the part ran unequally often: {part.calls}"
    return report(args, part, campaign_s, examples, ratios)


def report(
    args: argparse.Namespace,
    part: TimedPart,
    campaign_s: list[float],
    examples: list[int],
    ratios: list[float],
) -> dict[str, Any]:
    part_s = [ns / 1e9 for ns in part.cpu_ns]
    median, quartiles = spread(ratios)
    return {
        "engine": args.engine,
        "switch": args.switch,
        "part": args.part,
        "turns": args.turns,
        "examples": examples[0],
        "part_calls": part.calls[0],
        "part_cpu_s": dict(zip(SIDES, part_s, strict=True)),
        "part_us_per_call": {
            side: 1e6 * x / max(part.calls[0], 1) for side, x in zip(SIDES, part_s, strict=True)
        },
        "part_off_over_on": part_s[1] / part_s[0] if part_s[0] else float("nan"),
        "saved_share_of_campaign": (part_s[1] - part_s[0]) / campaign_s[1],
        "campaign_cpu_s": dict(zip(SIDES, campaign_s, strict=True)),
        "campaign_off_over_on": campaign_s[1] / campaign_s[0],
        "turn_ratio_median": median,
        "turn_ratio_quartiles": quartiles,
        "load_average": os.getloadavg(),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", required=True, help="module:Owner.attr, set True / False")
    parser.add_argument("--part", required=True, help="module:Owner.function, timed")
    parser.add_argument("--engine", default="reference", help="the engine fuzzed")
    parser.add_argument("--ignore", action="append", default=[], help="an invariant's kind")
    parser.add_argument("--turns", type=int, default=12, help="campaigns a side (default 12)")
    parser.add_argument("--examples-per-turn", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.examples_per_turn < 1:
        parser.error("--turns and --examples-per-turn: at least 1")
    for option in ("switch", "part"):
        try:
            resolve(getattr(args, option))
        except ValueError as exc:
            parser.error(f"--{option}: {exc}")
    return args


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    args = parse_args(argv)
    r = measure(args)
    if args.json:
        return print_json(r)
    on, off = (r["part_us_per_call"][s] for s in SIDES)
    out(f"{r['engine']}: {r['turns']} turns of {args.examples_per_turn} examples a side "
        f"({r['examples']} examples, {r['part_calls']} calls of the part a side)")  # fmt: skip
    out(f"  the part: {on:.1f} us a call with the switch on, {off:.1f} off: off/on "
        f"{r['part_off_over_on']:.3f}; the switch saves {100 * r['saved_share_of_campaign']:.2f}"
        " % of the campaign")  # fmt: skip
    low, high = r["turn_ratio_quartiles"]
    out(f"  the campaigns: off/on {r['campaign_off_over_on']:.3f}; the turns' ratios: median "
        f"{r['turn_ratio_median']:.3f}, quartiles {low:.3f}-{high:.3f} (noisy)")  # fmt: skip
    out(load_average_line(r["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
