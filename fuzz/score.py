"""The mutation score: one campaign per mutant of the reference engine's catalog.

A mutant is *found* when its campaign ends with a finding whose shrunk bundle fails with
the mutant and runs clean without it (`regression_ok`: exactly what its generated
regression test asserts). The score is found / total; times to detect are the campaigns'
`time_to_detect_s` (wall seconds from the campaign's start to the first failing example).

By default every campaign starts from an empty failure database, so a time to detect
measures the fuzzer, not a replay of last time's finding.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from schedcheck.engines.reference.mutants import MUTANTS, get_mutant
from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.regression import replay, write_regression
from schedcheck.fuzz.shrink import failure_kind
from schedcheck.fuzz.swarm import SwarmSpec


@dataclass(frozen=True)
class ScoreRow:
    mutant: str
    component: str
    found: bool
    time_to_detect_s: float | None
    shrunk_requests: int | None
    kind: str
    examples: int
    elapsed_s: float
    bundle: str | None
    regression_ok: bool
    regression: str | None = None  # the generated test file, if asked for

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ScoreOptions:
    mutants: tuple[str, ...] = ()  # () = the whole catalog
    budget_s: float = 60.0  # per mutant
    seed: int = 0
    workers: int = 1
    out_dir: str = ".schedcheck/fuzz/score"
    db_dir: str | None = None  # None: a fresh database per campaign
    regressions_dir: str | None = None
    shrink_runs_max: int = 200
    shrink_budget_s: float = 60.0

    def names(self) -> tuple[str, ...]:
        for name in self.mutants:
            get_mutant(name)  # ValueError on an unknown name
        return self.mutants or tuple(m.name for m in MUTANTS)


def score_mutants(
    opts: ScoreOptions, on_row: Callable[[ScoreRow], None] | None = None
) -> list[ScoreRow]:
    rows = []
    for name in opts.names():  # bounded by the catalog
        row = score_one(opts, name)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows


def score_one(opts: ScoreOptions, name: str) -> ScoreRow:
    """One campaign against mutant `name`; the finding's bundle checked both ways."""
    with tempfile.TemporaryDirectory(prefix="schedcheck-score-db-") as fresh_db:
        campaign = CampaignOptions(
            spec=SwarmSpec(engine="reference", mutant=name),
            seed=opts.seed,
            workers=opts.workers,
            budget_s=opts.budget_s,
            out_dir=str(Path(opts.out_dir) / name),
            db_dir=opts.db_dir or fresh_db,
            shrink_runs_max=opts.shrink_runs_max,
            shrink_budget_s=opts.shrink_budget_s,
        )
        result = run_campaign(campaign)
    finding = result.finding or {}
    bundle = finding.get("bundle")
    ok = bundle is not None and regression_holds(bundle, name)
    test = None
    if ok and bundle is not None and opts.regressions_dir is not None:
        test = str(write_regression(bundle, opts.regressions_dir, finding.get("headline", "")))
    return ScoreRow(
        mutant=name,
        component=get_mutant(name).component,
        found=ok,
        time_to_detect_s=finding.get("time_to_detect_s"),
        shrunk_requests=finding.get("shrunk_requests"),
        kind=finding.get("kind", ""),
        examples=result.examples,
        elapsed_s=round(result.elapsed_s, 3),
        bundle=bundle,
        regression_ok=ok,
        regression=test,
    )


def regression_holds(bundle: str, mutant: str) -> bool:
    """The bundle fails with the mutant and runs clean without it."""
    return bool(failure_kind(replay(bundle, mutant))) and not failure_kind(replay(bundle, None))


def summary(rows: Sequence[ScoreRow]) -> dict[str, Any]:
    times = [r.time_to_detect_s for r in rows if r.found and r.time_to_detect_s is not None]
    sizes = [r.shrunk_requests for r in rows if r.found and r.shrunk_requests is not None]
    return {
        "mutants": len(rows),
        "found": sum(r.found for r in rows),
        "score": round(sum(r.found for r in rows) / len(rows), 4) if rows else 0.0,
        "median_time_to_detect_s": round(statistics.median(times), 3) if times else None,
        "max_time_to_detect_s": max(times) if times else None,
        "max_shrunk_requests": max(sizes) if sizes else None,
        "missed": [r.mutant for r in rows if not r.found],
    }


def format_table(rows: Sequence[ScoreRow]) -> str:
    """mutant | component | found | time to detect | shrunk size | kind, then the score."""
    width = max(len(m.name) for m in MUTANTS)
    lines = [f"{'mutant':<{width}}  component  found  detect_s  requests  kind"]
    for r in rows:
        detect = f"{r.time_to_detect_s:8.2f}" if r.time_to_detect_s is not None else "       -"
        size = f"{r.shrunk_requests:8d}" if r.shrunk_requests is not None else "       -"
        lines.append(
            f"{r.mutant:<{width}}  {r.component:<9}  {'yes' if r.found else 'NO ':<5}"
            f"  {detect}  {size}  {r.kind}"
        )
    s = summary(rows)
    lines.append(
        f"score {s['found']}/{s['mutants']} = {s['score']:.2f}; time to detect median "
        f"{s['median_time_to_detect_s']} s, max {s['max_time_to_detect_s']} s; "
        f"largest reproducer {s['max_shrunk_requests']} requests"
    )
    if s["missed"]:
        lines.append("missed: " + ", ".join(s["missed"]))
    return "\n".join(lines)
