"""The nightly's page: the per-backend table, verdicts per backend, and each bundle's
verdict linking to its report."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from schedcheck.report.nightly import VERDICTS, Nightly
from schedcheck.report.page import Link, Section, figure, kv_table, render, rows_table

COLORS = {
    "consistent": "#2ca02c",
    "misaligned": "#d62728",
    "near-tie": "#ff7f0e",
    "refused": "#bbbbbb",
    "error": "#111111",
    "skipped": "#dddddd",
}


def verdicts_figure(nightly: Nightly) -> go.Figure:
    counts = nightly.counts()
    backends = list(counts)
    fig = go.Figure(
        [
            go.Bar(
                name=v, x=backends, y=[counts[b][v] for b in backends], marker={"color": COLORS[v]}
            )
            for v in VERDICTS
        ]
    )
    fig.update_layout(
        barmode="stack", title="Verdicts per backend", height=360, yaxis_title="bundles"
    )
    return fig


def backend_rows(nightly: Nightly) -> list[list[object]]:
    rows: list[list[object]] = []
    for backend, counts in nightly.counts().items():
        mine = [r for r in nightly.results if r["backend"] == backend]
        replay = sum(float(r.get("replay_s", 0.0)) for r in mine)
        forward = sum(float(r.get("forward_s", 0.0)) for r in mine)
        cost = f"{replay / forward:.2f}x" if forward > 0 else "-"
        failures = sum(bool(r.get("failed")) for r in mine)
        rows.append([backend, len(mine), *(counts[v] for v in VERDICTS), failures, cost])
    return rows


def nightly_page(nightly: Nightly, links: Mapping[str, str]) -> str:
    results = nightly.results
    per_bundle = [
        [
            Link(r["bundle"], links[r["bundle"]]) if r["bundle"] in links else r["bundle"],
            r["backend"],
            r["verdict"],
            r["expected"],
            "FAIL" if r.get("failed") else "",
            str(r.get("message", "")).splitlines()[0] if r.get("message") else "",
        ]
        for r in results
    ]
    sections = [
        Section("Nightly", kv_table([(k, str(v)) for k, v in nightly.meta.items()])),
        Section(
            "Per backend",
            rows_table(
                ("backend", "bundles", *VERDICTS, "failures", "replay / bare forward"),
                backend_rows(nightly),
            ),
        ),
        Section("Verdicts", figure(verdicts_figure(nightly), "verdicts")),
        Section(
            "Bundles",
            rows_table(
                ("bundle (report)", "backend", "verdict", "expected", "failed", "message"),
                per_bundle,
                bad=[bool(r.get("failed")) for r in results],
            ),
        ),
    ]
    return render(f"schedcheck GPU nightly: {nightly.path.name}", sections)
