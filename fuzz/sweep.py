"""A sweep: one trace replayed at every point of a grid of deployment configs, in parallel.

    grid = engines x block managers x block sizes x budgets x windows  (in that order)
    point i ──► the window's requests through that config, every invariant checked
                 └─ a finding: its bundle, and a copy shrunk by ddmin over requests
    results in grid order whoever ran them: this process, local processes or Ray tasks

A production trace replayed across every deployment config is what a team asks before a
config change. `run_point` takes and returns plain data (requests in, a row and packed
bundles out), so a point runs alike in a process pool or on a node that shares no disk.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from schedcheck.engines.registry import EngineLoadError
from schedcheck.fuzz.shrink import failure_kind, shrink_bundle
from schedcheck.sim.bundle_data import pack_dir, unpack_dir
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.deployment import DEPLOYMENTS
from schedcheck.sim.loop import RunResult, SimOptions, run
from schedcheck.traces.schema import TraceRequest

Window = tuple[float, float]  # (start_s, duration_s) in the source trace's seconds


@dataclass(frozen=True)
class SweepPoint:
    index: int
    engine: str
    block_manager: str
    block_size: int
    max_num_batched_tokens: int | None  # None: the deployment's budget
    window: Window | None  # None: the whole trace (after --max-requests)

    @property
    def label(self) -> str:
        """A directory name for the point's bundles: unique in its grid, path-safe."""
        budget = self.max_num_batched_tokens or "default"
        window = f"-w{self.window[0]:g}+{self.window[1]:g}" if self.window else ""
        engine = self.engine.replace(":", "_").replace("/", "_")
        return (
            f"{self.index:03d}-{engine}-{self.block_manager}-bs{self.block_size}-b{budget}{window}"
        )


@dataclass(frozen=True)
class SweepJob:
    """What every point of a sweep shares."""

    deployment: str
    mutant: str | None = None
    num_gpu_blocks: int | None = None
    seed: int = 0
    shrink: bool = True


def grid(
    engines: Sequence[str],
    block_managers: Sequence[str],
    block_sizes: Sequence[int],
    budgets: Sequence[int | None],
    windows: Sequence[Window | None],
) -> list[SweepPoint]:
    """Every combination, in the order of the arguments (the last varies fastest)."""
    combos = itertools.product(engines, block_managers, block_sizes, budgets, windows)
    return [SweepPoint(i, *combo) for i, combo in enumerate(combos)]


def run_point(job: SweepJob, point: SweepPoint, requests: list[TraceRequest]) -> dict[str, Any]:
    """Replay `requests` at `point`: its row of the table, and its bundles as data."""
    deployment = DEPLOYMENTS[job.deployment]
    try:
        config = deployment.engine_config(
            point.block_size,
            num_gpu_blocks=job.num_gpu_blocks,
            max_num_batched_tokens=point.max_num_batched_tokens,
            block_manager=point.block_manager,
            mutant=job.mutant,
        )
        result = run(
            requests, point.engine, config, SimOptions(seed=job.seed), deployment.cost_model()
        )
    except (EngineLoadError, ValueError) as exc:
        return {"row": _row(point, "refused", str(exc)), "bundles": {}}
    kind = failure_kind(result)
    row = _row(point, kind or "clean", _headline(result), result)
    if not kind:
        return {"row": row, "bundles": {}}
    with tempfile.TemporaryDirectory(prefix="schedcheck-sweep-") as tmp:
        raw = save_bundle(Path(tmp) / "raw", result)
        bundles = {"raw": pack_dir(raw)}
        if job.shrink:
            shrunk, _, kept = shrink_bundle(raw, Path(tmp) / "shrunk")
            bundles["shrunk"] = pack_dir(shrunk)
            row["shrunk_requests"] = kept
    return {"row": row, "bundles": bundles}


def _row(
    point: SweepPoint, outcome: str, headline: str, result: RunResult | None = None
) -> dict[str, Any]:
    return {
        "index": point.index,
        "label": point.label,
        "engine": point.engine,
        "block_manager": point.block_manager,
        "block_size": point.block_size,
        "max_num_batched_tokens": point.max_num_batched_tokens,
        "window": list(point.window) if point.window else None,
        "outcome": outcome,  # clean | an invariant | liveness | refused
        "headline": headline,
        "requests": len(result.trace) if result else 0,
        "steps": result.steps if result else 0,
        "fingerprint": result.fingerprint if result else None,
        "bundle": None,
        "shrunk_bundle": None,
        "shrunk_requests": None,
    }


def _headline(result: RunResult) -> str:
    if result.violations:
        return result.violations[0].headline()
    if result.stuck:
        rid, why = next(iter(sorted(result.stuck.items())))
        return f"liveness: {rid}: {why}"
    return ""


PointRunner = Callable[[SweepJob, list[tuple[SweepPoint, list[TraceRequest]]]], Iterator[dict]]


def run_here(job: SweepJob, work: list[tuple[SweepPoint, list[TraceRequest]]]) -> Iterator[dict]:
    """Every point in this process, in grid order."""
    for point, requests in work:
        yield run_point(job, point, requests)


def run_in_processes(workers: int) -> PointRunner:
    """Points in `workers` spawned processes; results as they finish."""

    def runner(job: SweepJob, work: list[tuple[SweepPoint, list[TraceRequest]]]) -> Iterator[dict]:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(run_point, job, point, requests) for point, requests in work]
            for future in futures:
                yield future.result()

    return runner


def sweep(
    job: SweepJob,
    work: list[tuple[SweepPoint, list[TraceRequest]]],
    out_dir: Path,
    runner: PointRunner = run_here,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every point; bundles under `out_dir/<label>/`; the rows in grid order."""
    rows = []
    for outcome in runner(job, work):
        row = outcome["row"]
        for name, files in sorted(outcome["bundles"].items()):
            folder = unpack_dir(files, out_dir / row["label"] / name)
            row["bundle" if name == "raw" else "shrunk_bundle"] = str(folder)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return sorted(rows, key=lambda row: row["index"])
