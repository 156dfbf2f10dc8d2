"""`schedcheck diff`: the same trace through two engines, schedules and outputs compared.

Exit codes: 0 same outputs, 1 a difference in outputs or a violation in either run, 2 bad
input, 3 a liveness failure in either run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from importlib import resources

from schedcheck.cli.commands.common import (
    UsageError,
    add_json_flag,
    add_trace_input_args,
    open_trace,
    run_guarded,
)
from schedcheck.cli.commands.replay import (
    DEFAULT_TRACE,
    add_cost_args,
    add_engine_args,
    cost_model,
    engine_config,
)
from schedcheck.cli.output import emit_json
from schedcheck.engines.registry import EngineLoadError
from schedcheck.sim.diff import DiffReport, compare
from schedcheck.sim.loop import EXIT_USAGE, SimOptions, run


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="replay one trace through two engines and compare schedules and outputs",
        description=(
            "Differential mode: replay one trace through two engines (each checked as by "
            "replay) and report, per request, where their schedules part (scheduled tokens, "
            "cache hits) and any difference in the sampled tokens (a violation)."
        ),
        epilog="Exit codes: 0 same outputs, 1 outputs differ or a violation, 2 bad input, "
        "3 liveness.",
    )
    add_trace_input_args(parser)
    add_engine_args(parser)
    add_cost_args(parser)
    parser.add_argument(
        "--engines", required=True, metavar="A,B", help="two engines, e.g. reference,vllm-v1"
    )
    parser.add_argument(
        "--block-managers",
        default=None,
        metavar="A,B",
        help="a block manager per engine (default: --block-manager for both)",
    )
    parser.add_argument(
        "--max-differences",
        type=int,
        default=20,
        metavar="N",
        help="schedule differences printed (default 20)",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def _run(args: argparse.Namespace) -> int:
    engines = tuple(e.strip() for e in args.engines.split(","))
    if len(engines) != 2 or not all(engines):
        raise UsageError("--engines takes two engine names, e.g. reference,vllm-v1")
    managers = (args.block_managers or "").split(",") if args.block_managers else [None, None]
    if len(managers) != 2:
        raise UsageError("--block-managers takes two names, e.g. hashed,v2")
    if args.trace is None:
        args.trace = str(resources.files("schedcheck.traces") / "corpus" / DEFAULT_TRACE)
    trace = list(open_trace(args))
    results = []
    for engine, manager in zip(engines, managers, strict=True):
        config = engine_config(args)
        if manager:
            config = dataclasses.replace(config, block_manager=manager)
        try:
            results.append(
                run(trace, engine, config, SimOptions(record_schedule=True), cost_model(args))
            )
        except (EngineLoadError, ValueError) as exc:
            print(f"schedcheck: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    report = compare((engines[0], engines[1]), results[0], results[1])
    _print(args, report)
    return report.exit_code


def _print(args: argparse.Namespace, report: DiffReport) -> None:
    if args.json:
        emit_json(report.to_json(), indent=1)
        return
    for name, res in zip(report.engines, report.results, strict=True):
        print(
            f"{name}: {res.finished} finished, {res.steps} steps, {len(res.violations)} "
            f"violations, fingerprint {res.fingerprint[:16]}"
        )
        for v in res.violations[:3]:
            print(f"  VIOLATION {v.headline()}")
    diffs = report.schedule_differences
    print(f"{len(diffs)} requests scheduled differently")
    for d in diffs[: args.max_differences]:
        print(f"  {d['request_id']}: step #{d['index']} of the request: {d['a']} vs {d['b']}")
    for v in report.violations[:10]:
        print(f"OUTPUTS DIFFER {v.request_id}: {v.message}")
    if not report.violations:
        print("outputs identical for every request finished by both")
