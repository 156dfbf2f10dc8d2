"""A run's page (`replay --out DIR --json` output, or its bundle): throughput, queue,
running requests, KV usage and prefix-hit ratio over simulated time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from schedcheck.report.page import Section, figure, kv_table, note, render
from schedcheck.report.replay import replay
from schedcheck.report.run_series import RunSeries
from schedcheck.report.usage import Usage
from schedcheck.sim.cost_model import StepCostModel
from schedcheck.traces import read_trace
from schedcheck.traces.bundle import Bundle


def build_run(bundle: Bundle) -> tuple[RunSeries, Usage]:
    cost = StepCostModel(**bundle.config["cost"])
    arrivals = {r.request_id: r.arrival_time_s for r in read_trace(bundle.trace_path)}
    series, usage = RunSeries(cost, arrivals), Usage()
    replay(bundle, [series, usage])
    return series, usage


def run_figure(series: RunSeries, usage: Usage) -> go.Figure:
    t = series.start_s
    throughput = [
        n / s if s > 0 else 0.0 for n, s in zip(series.sampled, series.step_time_s, strict=True)
    ]
    panels: list[tuple[str, list[tuple[str, Sequence[float]]]]] = [
        ("output tokens / s", [("throughput", throughput)]),
        ("requests", [("running", series.running), ("waiting", series.waiting)]),
        (
            "KV blocks",
            [(n, usage.column(n)) for n in ("blocks_used", "blocks_cached", "blocks_free")],
        ),
        ("prefix-hit ratio", [("hit ratio (cumulative)", series.hit_ratio)]),
    ]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.04)
    for row, (title, lines) in enumerate(panels, start=1):
        for name, ys in lines:
            fig.add_trace(
                go.Scatter(name=name, x=t, y=ys, mode="lines", line={"shape": "hv"}), row=row, col=1
            )
        fig.update_yaxes(title_text=title, row=row, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=len(panels), col=1)
    fig.update_layout(height=900, title="The run over simulated time", margin={"t": 50})
    return fig


def run_page(bundle: Bundle, run_json: dict[str, Any] | None = None) -> str:
    series, usage = build_run(bundle)
    summary = run_json or bundle.summary
    keys = (
        "engine",
        "block_manager",
        "mutant",
        "requests",
        "finished",
        "aborted",
        "rejected",
        "steps",
        "sim_time_s",
        "wall_time_s",
        "fingerprint",
        "exit_code",
    )
    rows = [(k, str(summary.get(k))) for k in keys if k in summary]
    rows.append(("bundle", str(bundle.path)))
    sections = [
        Section("Run", kv_table(rows)),
        Section(
            "Over simulated time",
            note(
                "The clock is rebuilt from the schedule, the cost model and the arrivals "
                f"(report/run_series.py); it ends at {series.clock_s:.2f} s here."
            )
            + figure(run_figure(series, usage), "run"),
        ),
    ]
    return render(f"schedcheck run: {bundle.path.name}", sections)
