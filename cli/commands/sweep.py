"""`schedcheck sweep`: one trace replayed across a grid of deployment configs, in parallel.

Exit codes: 0 every point clean, 1 a point found something (bundles written), 2 bad input.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from schedcheck.cli.commands.common import (
    UsageError,
    add_json_flag,
    add_trace_input_args,
    non_negative_int,
    positive_int,
    progress,
    run_guarded,
)
from schedcheck.cli.commands.replay import DEFAULT_TRACE
from schedcheck.cli.output import emit_json
from schedcheck.fuzz.ray_cluster import RayMissing, import_ray, sweep_runner
from schedcheck.fuzz.sweep import (
    PointRunner,
    SweepJob,
    Window,
    grid,
    run_here,
    run_in_processes,
    sweep,
)
from schedcheck.sim.deployment import DEPLOYMENTS, LLAMA3_8B_H100
from schedcheck.traces import iter_trace

T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="replay one trace across a grid of configs (block sizes, budgets, engines, ...)",
        description=(
            "Replay a trace at every point of a grid of deployment configs (engines x "
            "block managers x block sizes x budgets x windows), every invariant checked, in "
            "parallel: local processes, or Ray tasks on a cluster (--ray). A point that "
            "finds something gets a bundle and a shrunk copy under OUT/<point>/. Without "
            "TRACE, the bundled first 200 requests of the Mooncake conversation trace."
        ),
        epilog="Exit codes: 0 every point clean, 1 a finding, 2 bad input.",
    )
    add_trace_input_args(parser)
    grid_args = parser.add_argument_group("the grid (comma-separated lists)")
    grid_args.add_argument("--engines", default="reference", metavar="E,...")
    grid_args.add_argument("--block-managers", default="hashed", metavar="M,...")
    grid_args.add_argument("--block-sizes", default="16", metavar="N,...")
    grid_args.add_argument(
        "--budgets",
        default="default",
        metavar="N,...",
        help="max_num_batched_tokens values ('default': the deployment's)",
    )
    grid_args.add_argument(
        "--windows",
        default=None,
        metavar="START:DURATION,...",
        help="windows of the source trace in its seconds (default: the whole trace after "
        "--start-s/--duration-s)",
    )
    run_args = parser.add_argument_group("runs")
    run_args.add_argument("--deployment", choices=sorted(DEPLOYMENTS), default=LLAMA3_8B_H100.name)
    run_args.add_argument("--num-gpu-blocks", type=positive_int, default=None, metavar="N")
    run_args.add_argument("--mutant", default=None, help="switch on a named mutant everywhere")
    run_args.add_argument("--seed", type=non_negative_int, default=0, metavar="N")
    run_args.add_argument("--no-shrink", action="store_true", help="keep findings unshrunk")
    run_args.add_argument(
        "--workers", type=positive_int, default=1, metavar="N", help="points in parallel"
    )
    run_args.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="points as Ray tasks (pip install 'schedcheck[ray]'): no ADDRESS starts a "
        "local Ray, 'auto' or HOST:PORT joins a cluster",
    )
    run_args.add_argument("--out", metavar="DIR", required=True, help="bundles go here")
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def _list(text: str, flag: str, parse: Callable[[str], T]) -> list[T]:
    items = [item.strip() for item in text.split(",")]
    if not items or not all(items):
        raise UsageError(f"{flag} {text!r}: a comma-separated list with no empty item")
    try:
        return [parse(item) for item in items]
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r}: {exc}") from None


def _size(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"{value} is not >= 1")
    return value


def _budget(text: str) -> int | None:
    return None if text == "default" else _size(text)


def _window(text: str) -> Window:
    start, sep, duration = text.partition(":")
    if not sep or float(start) < 0 or float(duration) <= 0:
        raise ValueError(f"{text!r} is not START:DURATION with START >= 0, DURATION > 0")
    return float(start), float(duration)


def _run(args: argparse.Namespace) -> int:
    if args.ray is not None:
        try:
            import_ray(args.ray or None)
        except RayMissing as exc:
            raise UsageError(str(exc)) from None
    if args.trace is None:
        args.trace = str(resources.files("schedcheck.traces") / "corpus" / DEFAULT_TRACE)
    windows: list[Window | None] = [None]
    if args.windows:
        windows = list(_list(args.windows, "--windows", _window))
    points = grid(
        _list(args.engines, "--engines", str),
        _list(args.block_managers, "--block-managers", str),
        _list(args.block_sizes, "--block-sizes", _size),
        _list(args.budgets, "--budgets", _budget),
        windows,
    )
    requests = {window: _requests(args, window) for window in windows}
    work = [(point, requests[point.window]) for point in points]
    job = SweepJob(args.deployment, args.mutant, args.num_gpu_blocks, args.seed, not args.no_shrink)
    runner: PointRunner = run_here
    if args.ray is not None:
        runner = sweep_runner(args.ray or None, args.workers)
    elif args.workers > 1:
        runner = run_in_processes(args.workers)
    bar = progress(range(len(points)), enabled=not args.json, desc="sweep", unit="point")
    ticks = iter(bar)

    def tick(row: dict[str, Any]) -> None:
        next(ticks, None)

    rows = sweep(job, work, Path(args.out).resolve(), runner, tick)
    _print(args, rows)
    return 1 if any(row["outcome"] not in ("clean", "refused") for row in rows) else 0


def _requests(args: argparse.Namespace, window: Window | None) -> list[Any]:
    start_s, duration_s = window if window else (args.start_s, args.duration_s)
    return list(
        iter_trace(
            args.trace,
            args.trace_format,
            time_scale=args.time_scale,
            start_s=start_s,
            duration_s=duration_s,
            max_requests=args.max_requests,
        )
    )


def _print(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    if args.json:
        findings = sum(row["outcome"] not in ("clean", "refused") for row in rows)
        emit_json({"points": rows, "findings": findings}, indent=1, sort_keys=True)
        return
    print(f"{'point':<44} {'requests':>8} {'steps':>7}  outcome")
    for row in rows:
        print(f"{row['label']:<44} {row['requests']:>8} {row['steps']:>7}  {row['outcome']}")
        if row["outcome"] not in ("clean",):
            print(f"    {row['headline']}")
        if row["shrunk_bundle"]:
            print(f"    shrunk to {row['shrunk_requests']} requests: {row['shrunk_bundle']}")
