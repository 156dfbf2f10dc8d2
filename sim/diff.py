"""Differential replay: one trace through two engines, schedules and outputs compared.

Schedules may differ (two correct schedulers batch differently); outputs may not: with the
hash model, a request's tokens depend only on its prompt, so any difference in the tokens
of a request that finished in both runs is a violation of one of the engines.

Per request, each engine's schedule is its sequence of steps::

    (num_computed_tokens, num_scheduled_tokens, num_cached_tokens)  for every step it ran

and the first index where the two sequences differ is reported (with both entries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from schedcheck.engines.protocol import SchedulerOutput
from schedcheck.invariants.violation import Violation
from schedcheck.sim.loop import RunResult

StepEntry = tuple[int, int, int, int]  # (step, num_computed, num_scheduled, num_cached)


@dataclass
class DiffReport:
    engines: tuple[str, str]
    results: tuple[RunResult, RunResult]
    schedule_differences: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.violations or any(r.violations for r in self.results):
            return 1
        return 3 if any(r.stuck for r in self.results) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "engines": list(self.engines),
            "runs": [r.summary() for r in self.results],
            "schedule_differences": self.schedule_differences,
            "requests_with_different_schedules": len(self.schedule_differences),
            "violations": [v.to_json() for v in self.violations],
            "exit_code": self.exit_code,
        }


def per_request_schedule(schedule: Sequence[SchedulerOutput]) -> dict[str, list[StepEntry]]:
    out: dict[str, list[StepEntry]] = {}
    for step in schedule:
        for r in step.scheduled:
            entry = (step.step, r.num_computed_tokens, r.num_scheduled_tokens, r.num_cached_tokens)
            out.setdefault(r.request_id, []).append(entry)
    return out


def compare(engines: tuple[str, str], a: RunResult, b: RunResult) -> DiffReport:
    """Compare two recorded runs of the same trace."""
    report = DiffReport(engines, (a, b))
    sched_a, sched_b = per_request_schedule(a.schedule), per_request_schedule(b.schedule)
    for rid in sorted(set(sched_a) | set(sched_b)):
        first = _first_difference(sched_a.get(rid, []), sched_b.get(rid, []))
        if first is not None:
            report.schedule_differences.append({"request_id": rid, **first})
    for rid in sorted(set(a.outputs) & set(b.outputs)):
        out_a, out_b = a.outputs[rid], b.outputs[rid]
        k = next((i for i, (x, y) in enumerate(zip(out_a, out_b, strict=False)) if x != y), -1)
        if k < 0 and len(out_a) != len(out_b):
            k = min(len(out_a), len(out_b))
        if k >= 0:
            report.violations.append(
                Violation(
                    "diff.outputs",
                    -1,
                    f"output {k} differs: {engines[0]} gives "
                    f"{_at(out_a, k)}, {engines[1]} gives {_at(out_b, k)}",
                    request_id=rid,
                    expected=_at(out_a, k),
                    found=_at(out_b, k),
                )
            )
    return report


def _first_difference(sa: list[StepEntry], sb: list[StepEntry]) -> dict[str, Any] | None:
    """Where two per-request schedules part (step numbers themselves are not compared)."""
    n = max(len(sa), len(sb))
    for k in range(n):  # bounded: the longer schedule
        ea = sa[k][1:] if k < len(sa) else None
        eb = sb[k][1:] if k < len(sb) else None
        if ea != eb:
            return {
                "index": k,
                "a": _entry(sa[k]) if k < len(sa) else None,
                "b": _entry(sb[k]) if k < len(sb) else None,
            }
    return None


def _entry(e: StepEntry) -> dict[str, int]:
    step, ncomp, nsched, ncached = e
    return {"step": step, "num_computed_tokens": ncomp, "num_scheduled_tokens": nsched,
            "num_cached_tokens": ncached}  # fmt: skip


def _at(tokens: Sequence[int], k: int) -> str:
    return str(tokens[k]) if k < len(tokens) else "end"
