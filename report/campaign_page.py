"""A campaign's page: examples over time, findings linking to their reports, rare-path
coverage (never-reached ones marked) and the swarm's config distribution."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from schedcheck.report.campaign import Campaign
from schedcheck.report.page import Link, Section, figure, kv_table, note, render, rows_table

SUMMARY_KEYS = (
    "engine",
    "mutant",
    "block_manager",
    "seed",
    "workers",
    "budget_s",
    "elapsed_s",
    "examples",
    "found",
    "kind",
    "signature",
    "time_to_detect_s",
    "reproduce",
    "reproduce_campaign",
)


def examples_figure(report: Mapping[str, Any]) -> go.Figure:
    points = [[0.0, 0], *(report.get("progress") or [])]
    fig = go.Figure(
        go.Scatter(
            name="examples",
            x=[p[0] for p in points],
            y=[p[1] for p in points],
            mode="lines+markers",
        )
    )
    if report.get("time_to_detect_s") is not None:
        fig.add_vline(
            x=report["time_to_detect_s"],
            line={"color": "#d62728", "dash": "dot"},
            annotation_text="finding",
        )
    fig.update_layout(
        title="Examples over time",
        height=320,
        xaxis_title="elapsed (s)",
        yaxis_title="examples (cumulative)",
    )
    return fig


def coverage_figure(report: Mapping[str, Any]) -> go.Figure:
    coverage = report.get("coverage") or {}
    never = set(report.get("never_reached") or [])
    names = list(coverage)
    fig = go.Figure(
        go.Bar(
            name="rare paths",
            x=names,
            y=[coverage[n] for n in names],
            marker={"color": ["#d62728" if n in never else "#2ca02c" for n in names]},
            text=["never reached" if n in never else str(coverage[n]) for n in names],
        )
    )
    fig.update_layout(
        title="Rare-path coverage (red: never reached)", height=360, yaxis_title="times reached"
    )
    return fig


def configs_figure(report: Mapping[str, Any]) -> go.Figure:
    configs = report.get("configs") or {}
    knobs = list(configs)
    cols = 3
    rows = max(1, -(-len(knobs) // cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=knobs or ["no configs recorded"])
    for i, knob in enumerate(knobs):
        counts = configs[knob]
        values = sorted(counts, key=_number_first)
        fig.add_trace(
            go.Bar(name=knob, x=values, y=[counts[v] for v in values], showlegend=False),
            row=i // cols + 1,
            col=i % cols + 1,
        )
        fig.update_xaxes(type="category", row=i // cols + 1, col=i % cols + 1)
    fig.update_layout(title="Swarm config distribution (examples per value)", height=240 * rows)
    return fig


def _number_first(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def campaign_sections(campaign: Campaign, links: Mapping[str, str], index: int) -> list[Section]:
    report = campaign.report or {}
    rows = [(k, str(report.get(k))) for k in SUMMARY_KEYS if report.get(k) is not None]
    rows.append(("directory", str(campaign.path)))
    bundles = [
        [
            b.role,
            Link(b.path.name, links[str(b.path)]) if str(b.path) in links else b.path.name,
            b.requests,
            b.headline,
        ]
        for b in campaign.bundles
    ]
    sections = [
        Section(f"Campaign {campaign.path.name}", kv_table(rows)),
        Section(
            "Findings",
            rows_table(("role", "bundle (report)", "requests", "violation"), bundles)
            if bundles
            else note("No bundle in this directory: nothing found."),
        ),
    ]
    if campaign.report is None:
        sections.append(Section("Campaign record", note("No campaign.json: only the bundles.")))
        return sections
    sections += [
        Section("Examples over time", figure(examples_figure(report), f"examples-{index}")),
        Section("Rare-path coverage", figure(coverage_figure(report), f"coverage-{index}")),
        Section("Swarm configs", figure(configs_figure(report), f"configs-{index}")),
    ]
    return sections


def distinct_findings(campaigns: list[Campaign], links: Mapping[str, str]) -> Section:
    """One row per distinct finding (signature) of a --continue-past-findings run."""
    rows = []
    for c in campaigns:  # bounded: the run's campaigns
        report = c.report or {}
        if not report.get("found"):
            continue
        bundle = str(report.get("bundle") or "")
        name = Link(bundle.rsplit("/", 1)[-1], links[bundle]) if bundle in links else bundle
        rows.append(
            [report.get("signature") or report.get("kind"), report.get("time_to_detect_s"),
             report.get("shrunk_requests"), name]
        )  # fmt: skip
    header = ("signature", "time to detect (s)", "shrunk requests", "bundle (report)")
    return Section(
        "Distinct findings",
        rows_table(header, rows) if rows else note("No campaign found anything."),
    )


def campaign_page(campaigns: list[Campaign], links: Mapping[str, str]) -> str:
    sections = [s for i, c in enumerate(campaigns) for s in campaign_sections(c, links, i)]
    if len(campaigns) > 1:
        sections.insert(0, distinct_findings(campaigns, links))
    return render(f"schedcheck campaign: {campaigns[0].path.name}", sections)
