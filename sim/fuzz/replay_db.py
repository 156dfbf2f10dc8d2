"""Replay the failure database's findings of a target before any new example is drawn.

A finding with a scenario is judged again as a fuzz example (with a mutant, it must still
run clean without it); one without (a shrunk real trace) is rerun from its bundle. The
first that still fails is the campaign's finding, reported like a worker's, with
`replayed: true`.
"""

from __future__ import annotations

import time
from typing import Any

from schedcheck.sim.bundles import rerun_bundle
from schedcheck.sim.fuzz.database import FailureDB
from schedcheck.sim.fuzz.scenario import Scenario
from schedcheck.sim.fuzz.shrink import failure_kind
from schedcheck.sim.fuzz.swarm import SwarmSpec
from schedcheck.sim.fuzz.verdict import judge


def replay_findings(db: FailureDB, spec: SwarmSpec, started_at_s: float) -> dict[str, Any] | None:
    """The first recorded finding of `spec`'s target that still fails, as a message."""
    for entry in db.findings(spec):  # bounded by the file
        kind, requests = _still_fails(entry)
        if kind:
            return {
                "type": "finding",
                "worker": -1,
                "round": -1,
                "round_seed": None,
                "time_to_detect_s": round(time.time() - started_at_s, 3),
                "examples_in_round": 0,
                "shrink_runs": 0,
                "ddmin_s": 0.0,
                "hypothesis_requests": requests,
                "shrunk_requests": requests,
                "kind": kind,
                "headline": entry.get("headline", ""),
                "bundle": entry.get("bundle"),
                "scenario": entry.get("scenario"),
                "replayed": True,
            }
    return None


def _still_fails(entry: dict[str, Any]) -> tuple[str, int]:
    """(the failure's kind or "", its request count) for one database entry."""
    try:
        if entry.get("scenario"):
            scenario = Scenario.from_json(entry["scenario"])
            verdict = judge(scenario)
            return (verdict.kind if verdict.failed else ""), scenario.num_requests
        if entry.get("bundle"):
            result, _ = rerun_bundle(entry["bundle"])
            return failure_kind(result), len(result.trace)
    except (OSError, ValueError, KeyError, TypeError):
        return "", 0  # a stale entry (moved bundle, older format): skipped
    return "", 0
