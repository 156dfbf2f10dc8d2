"""A finding's page: header, timeline, KV story (chart and table), block tables, KV usage,
the recorded and replayed violations, and the GPU verification when one lies beside it."""

from __future__ import annotations

from typing import Any

from schedcheck.report.figures.finding import (
    grid_figure,
    story_figure,
    story_table,
    timeline_figure,
    usage_figure,
)
from schedcheck.report.finding import Finding
from schedcheck.report.page import Section, figure, kv_table, note, render, rows_table

VIOLATION_COLUMNS = ("invariant", "step", "request_id", "position", "slot", "block", "message")


def finding_page(finding: Finding) -> str:
    focus = finding.focus
    sections = [
        Section("Finding", kv_table(finding.header)),
        Section(
            "Schedule timeline",
            figure(timeline_figure(finding), "timeline")
            + note(f"Step {focus.step} and request {focus.request_id or '-'} are shaded red."),
        ),
        _story(finding),
        _grid(finding),
        Section("KV-cache usage", figure(usage_figure(finding.usage, focus.step), "usage")),
        _violations(finding),
    ]
    if finding.verify:
        sections.append(_verify(finding.verify))
    return render(f"schedcheck finding: {finding.bundle.path.name}", sections)


def _story(finding: Finding) -> Section:
    story = finding.story
    if story is None:
        return Section("KV story", note(f"No block to follow: {finding.focus.why}."))
    body = (
        note(f"Block {story.block}: {finding.focus.why}. {_derived(bool(story.engine))}")
        + figure(story_figure(story), "kv-story")
        + figure(story_table(story), "kv-story-table")
    )
    return Section(f"KV story of block {story.block}", body)


def _derived(engine: bool) -> str:
    text = (
        "Owners and ref_cnt are the live requests whose block table holds the block; content "
        "is what the shadow KV holds after replaying the recorded schedule; state cached = no "
        "owner and full, with prefix caching on. "
    )
    if engine:
        return text + "The engine lane is the engine's own snapshot after each step (kv_events)."
    return text + "This bundle has no kv_events.jsonl: the engine's own view is not shown."


def _grid(finding: Finding) -> Section:
    grid = finding.grid
    if grid is None or not grid.request_ids:
        return Section("Block tables", note("No live request holds the focus block at that step."))
    return Section("Block tables", figure(grid_figure(grid), "block-grid"))


def _violations(finding: Finding) -> Section:
    recorded = [[v.get(c) for c in VIOLATION_COLUMNS] for v in finding.bundle.violations]
    replayed = [[v.to_json().get(c) for c in VIOLATION_COLUMNS] for v in finding.replay_violations]
    verdict = {
        True: "the offline replay of the schedule finds the first recorded violation again",
        False: "the offline replay of the schedule does NOT find the first recorded violation",
        None: "the first recorded violation is not a shadow-KV one (engine state, outputs)",
    }[finding.reproduced]
    if finding.unmodelled:
        verdict = f"not compared: the offline replay does not model {finding.unmodelled}"
    body = (
        rows_table(VIOLATION_COLUMNS, recorded)
        + note(f"Shadow KV replayed offline: {verdict}.")
        + rows_table(VIOLATION_COLUMNS, replayed[:50])
    )
    return Section("Violations (recorded; replayed offline)", body)


def _verify(reports: list[dict[str, Any]]) -> Section:
    parts = []
    for rep in reports:
        parts.append(
            note(
                f"{rep['file']}: {rep.get('verdict')} on {rep.get('backend')} "
                f"({rep.get('device')}, {rep.get('dtype')}), {rep.get('num_divergences', 0)} "
                "divergence(s)"
            )
        )
        first = rep.get("first_divergence") or {}
        rows = [
            [
                rid,
                f.get("kind"),
                f.get("cls"),
                f.get("step"),
                f.get("position"),
                f.get("error"),
                f.get("tolerance"),
                f.get("message"),
            ]
            for rid, f in sorted(first.items())
        ]
        columns = ("request", "kind", "class", "step", "position", "error", "tolerance", "message")
        parts.append(rows_table(columns, rows))
    return Section("GPU verification (first divergence per request)", "".join(parts))
