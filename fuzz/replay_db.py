"""Replay the failure database's findings of a target before any new example is drawn.

A finding with a scenario is judged again as a fuzz example (with a mutant, it must still
run clean without it); one without (a shrunk real trace) is rerun from its bundle. The
first that still fails is the campaign's finding, reported as what it is NOW, since the
code under test may have changed since it was recorded:

    entry i of the database (kind K0, headline H0, bundle B0: left as it was)
      └─ still fails, now as kind K1 with headline H1
           ├─ OUT/db<i>-raw       the entry's run today            ("raw" message)
           └─ OUT/db<i>-shrunk    shrunk again, keeping to K1      ("finding" message:
                                  kind K1, headline H1, replayed: true,
                                  replayed_from: {bundle B0, kind K0, headline H0},
                                  changed: K1 != K0 or H1 != H0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schedcheck.fuzz.database import FailureDB
from schedcheck.fuzz.scenario import Scenario
from schedcheck.fuzz.shrink import (
    failure_kind,
    failure_signature,
    shrink_bundle,
    shrink_scenario,
)
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.verdict import LIVENESS, judge
from schedcheck.fuzz.worker import save_scenario_bundle
from schedcheck.sim.bundles import rerun_bundle, save_bundle
from schedcheck.sim.loop import RunResult

Report = Callable[[dict[str, Any]], None]


def replay_findings(
    db: FailureDB, spec: SwarmSpec, started_at_s: float, out_dir: Path, report: Report
) -> bool:
    """Report the first recorded finding of `spec`'s target that still fails; True if one."""
    for index, entry in enumerate(db.findings(spec)):  # bounded by the file
        if {entry.get("kind"), entry.get("signature")} & set(spec.ignore):
            continue  # a bug this campaign goes on past (--ignore, --continue-past-findings)
        try:
            now = _replay_entry(entry, out_dir / f"db{index}")
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a stale entry (moved bundle, older format): skipped
        if now is None:
            continue
        report({"type": "raw", "worker": -1, "round": -1, **now["raw"], "examples": 0})
        report(_finding_message(entry, now, started_at_s))
        return True
    return False


def _finding_message(
    entry: dict[str, Any], now: dict[str, Any], started_at_s: float
) -> dict[str, Any]:
    recorded = {k: entry.get(k) for k in ("bundle", "kind", "signature", "headline")}
    return {
        "type": "finding",
        "worker": -1,
        "round": -1,
        "round_seed": None,
        "time_to_detect_s": round(time.time() - started_at_s, 3),
        "examples_in_round": 0,
        "shrink_runs": 0,
        "ddmin_s": now["ddmin_s"],
        "hypothesis_requests": now["raw"]["requests"],
        "shrunk_requests": now["shrunk_requests"],
        "kind": now["kind"],
        "signature": now["signature"],
        "headline": now["headline"],
        "bundle": now["bundle"],
        "raw_bundle": now["raw"]["bundle"],
        "scenario": now["scenario"],
        "replayed": True,
        "replayed_from": recorded,
        "changed": (now["kind"], now["headline"]) != (recorded["kind"], recorded["headline"]),
    }


def _replay_entry(entry: dict[str, Any], base: Path) -> dict[str, Any] | None:
    """What the entry's run is today (new raw and shrunk bundles), or None if it is clean."""
    if entry.get("scenario"):
        return _replay_scenario(Scenario.from_json(entry["scenario"]), base)
    if entry.get("bundle"):
        return _replay_bundle(entry["bundle"], base)
    return None


def _replay_scenario(scenario: Scenario, base: Path) -> dict[str, Any] | None:
    verdict = judge(scenario)
    if not verdict.failed:
        return None
    raw_bundle = save_scenario_bundle(Path(f"{base}-raw"), scenario)
    started = time.monotonic()

    def fails_as_now(candidate: Scenario) -> bool:
        again = judge(candidate)
        return again.failed and again.signature == verdict.signature

    shrunk = shrink_scenario(scenario, fails_as_now)
    shrunk_verdict = judge(shrunk)
    assert shrunk_verdict.failed and shrunk_verdict.signature == verdict.signature
    return {
        "raw": {
            "kind": verdict.kind,
            "headline": verdict.headline,
            "bundle": raw_bundle,
            "requests": scenario.num_requests,
        },
        "kind": shrunk_verdict.kind,
        "signature": shrunk_verdict.signature,
        "headline": shrunk_verdict.headline,
        "bundle": save_scenario_bundle(Path(f"{base}-shrunk"), shrunk),
        "scenario": shrunk.to_json(),
        "shrunk_requests": shrunk.num_requests,
        "ddmin_s": round(time.monotonic() - started, 3),
    }


def _replay_bundle(bundle: str, base: Path) -> dict[str, Any] | None:
    result, _ = rerun_bundle(bundle)
    kind = failure_kind(result)
    if not kind:
        return None
    raw_bundle = save_bundle(Path(f"{base}-raw"), result)
    started = time.monotonic()
    shrunk_path, _, kept = shrink_bundle(raw_bundle, Path(f"{base}-shrunk"))
    shrunk, _ = rerun_bundle(shrunk_path)
    return {
        "raw": {
            "kind": kind,
            "headline": _headline(result),
            "bundle": str(raw_bundle),
            "requests": len(result.trace),
        },
        "kind": failure_kind(shrunk),
        "signature": failure_signature(shrunk),
        "headline": _headline(shrunk),
        "bundle": str(shrunk_path),
        "scenario": None,
        "shrunk_requests": kept,
        "ddmin_s": round(time.monotonic() - started, 3),
    }


def _headline(result: RunResult) -> str:
    """The run's finding in one line, as a campaign's verdict words it."""
    if result.violations:
        return result.violations[0].headline()
    rid, why = next(iter(sorted(result.stuck.items())))
    return f"{LIVENESS}: {rid}: {why}"
