"""The plotly figures of a finding's page (report/finding.py holds their data).

timeline_figure   one row per request, steps on x; a trace per kind of mark, in
                  timeline.KINDS order, then `violation`; the violating request's row
                  and the violating step are shaded (layout shapes named
                  "violating request" and "violating step")
story_figure      the focus block's lanes (kv_story.LANES): state as segments (a trace
                  per state, STATES order), then owners, content, writes, read
story_table       the same events as a table
grid_figure       block tables of the involved requests at the violating step
usage_figure      blocks used / cached / free and prefix-hit tokens per step
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from schedcheck.report.block_grid import CATEGORIES, Grid
from schedcheck.report.finding import Finding, Focus
from schedcheck.report.kv_story import LANES, BlockStory
from schedcheck.report.timeline import KINDS, Mark
from schedcheck.report.usage import Usage

STATES = ("in use", "cached", "free")
HIGHLIGHT = "rgba(220, 40, 40, 0.15)"
STYLE = {  # kind -> (symbol, color, size)
    "prefill": ("square", "#1f77b4", 9),
    "decode": ("line-ns", "#7fb3d5", 7),
    "cache hit": ("diamond-open", "#2ca02c", 13),
    "preempted": ("x", "#ff7f0e", 11),
    "resumed": ("triangle-right", "#9467bd", 11),
    "aborted": ("x-thin-open", "#111111", 12),
    "finished": ("circle-open", "#555555", 10),
}
STATE_COLORS = {"in use": "#1f77b4", "cached": "#2ca02c", "free": "#bbbbbb"}
LANE_STYLE = {  # lane -> (symbol, color)
    "owners": ("circle", "#9467bd"),
    "content": ("diamond", "#8c564b"),
    "writes": ("triangle-down", "#1f77b4"),
    "read": ("star", "#d62728"),
    "engine": ("square", "#17becf"),
}


def timeline_figure(finding: Finding) -> go.Figure:
    focus, rows = finding.focus, finding.request_ids
    fig = go.Figure()
    for kind in KINDS:
        fig.add_trace(_marks_trace(kind, [m for m in finding.marks if m.kind == kind]))
    bad = [focus.request_id] if focus.request_id in rows else []
    fig.add_trace(
        go.Scatter(
            name="violation",
            x=[focus.step] * len(bad),
            y=bad,
            mode="markers",
            marker={"symbol": "star", "size": 18, "color": "#d62728"},
            hovertext=[finding.header[0][1]] * len(bad),
            hoverinfo="text",
        )
    )
    _highlight(fig, focus, rows)
    fig.update_layout(
        title="Schedule timeline (one row per request)",
        height=max(320, min(3000, 140 + 16 * len(rows))),
        xaxis={
            "title": "step",
            "range": [finding.step_range[0] - 0.5, finding.step_range[1] + 0.5],
        },
        yaxis=_request_axis(rows, focus.request_id),
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0.3},
        margin={"l": 90, "r": 20, "t": 50, "b": 40},
    )
    return fig


def _marks_trace(kind: str, marks: Sequence[Mark]) -> go.Scatter:
    symbol, color, size = STYLE[kind]
    if kind == "decode":  # runs of steps: one segment each
        xs: list[float | None] = []
        ys: list[str | None] = []
        texts: list[str | None] = []
        for m in marks:
            xs += [m.step, m.last_step, None]
            ys += [m.request_id, m.request_id, None]
            texts += [f"{m.request_id}: {m.text}"] * 2 + [None]
        return go.Scatter(
            name=kind,
            x=xs,
            y=ys,
            mode="lines+markers",
            hovertext=texts,
            hoverinfo="text",
            line={"color": color, "width": 5},
            marker={"symbol": symbol, "size": size, "color": color},
        )
    return go.Scatter(
        name=kind,
        x=[m.step for m in marks],
        y=[m.request_id for m in marks],
        mode="markers",
        hovertext=[f"{m.request_id} step {m.step}: {m.text}" for m in marks],
        hoverinfo="text",
        marker={
            "symbol": symbol,
            "color": color,
            "size": size,
            "line": {"width": 2, "color": color},
        },
    )


def _request_axis(rows: Sequence[str], focus_request: str) -> dict:
    text = [f"<b>▶ {r}</b>" if r == focus_request else r for r in rows]
    return {
        "title": "request",
        "type": "category",
        "categoryorder": "array",
        "categoryarray": list(rows),
        "tickvals": list(rows),
        "ticktext": text,
        "autorange": "reversed",
    }


def _highlight(fig: go.Figure, focus: Focus, rows: Sequence[str]) -> None:
    if focus.request_id in rows:
        index = list(rows).index(focus.request_id)
        fig.add_shape(
            type="rect",
            name="violating request",
            xref="paper",
            x0=0,
            x1=1,
            y0=index - 0.5,
            y1=index + 0.5,
            fillcolor=HIGHLIGHT,
            line={"width": 0},
            layer="below",
        )
    fig.add_shape(
        type="rect",
        name="violating step",
        yref="paper",
        y0=0,
        y1=1,
        x0=focus.step - 0.5,
        x1=focus.step + 0.5,
        fillcolor=HIGHLIGHT,
        line={"width": 0},
        layer="below",
    )


def story_figure(story: BlockStory) -> go.Figure:
    fig = go.Figure()
    runs = state_runs(story.states)
    for state in STATES:
        xs: list[float | None] = []
        for first, last, s in runs:
            if s == state:
                xs += [first - 0.5, last + 0.5, None]
        fig.add_trace(
            go.Scatter(
                name=f"state: {state}",
                x=xs,
                y=["state" if x is not None else None for x in xs],
                mode="lines",
                line={"color": STATE_COLORS[state], "width": 14},
                hoverinfo="name",
            )
        )
    for lane in LANES[::-1][1:]:  # owners, engine, content, writes, read
        events = [e for e in story.events if e.lane == lane]
        symbol, color = LANE_STYLE[lane]
        fig.add_trace(
            go.Scatter(
                name=lane,
                x=[e.step for e in events],
                y=[lane] * len(events),
                mode="markers",
                hovertext=[f"step {e.step}: {e.text}" for e in events],
                hoverinfo="text",
                marker={"symbol": symbol, "color": color, "size": 16 if lane == "read" else 11},
            )
        )
    first = story.states[0][0] if story.states else story.last_step
    last = story.states[-1][0] if story.states else story.last_step
    fig.update_layout(
        title=f"KV story of block {story.block} (hover a mark for the event)",
        height=340,
        xaxis={"title": "step", "range": [first - 0.5, last + 0.5]},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": list(LANES)},
        margin={"l": 80, "r": 20, "t": 50, "b": 40},
    )
    return fig


def state_runs(states: Sequence[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """(first step, last step, state) of each run of equal states in consecutive steps."""
    runs: list[tuple[int, int, str]] = []
    for step, state in states:
        if runs and runs[-1][2] == state and runs[-1][1] == step - 1:
            runs[-1] = (runs[-1][0], step, state)
        else:
            runs.append((step, step, state))
    return runs


def story_table(story: BlockStory) -> go.Figure:
    events = story.events
    fig = go.Figure(
        go.Table(
            columnwidth=[40, 60, 420, 50, 60],
            header={"values": ["step", "lane", "event", "ref_cnt", "state"], "align": "left"},
            cells={
                "values": [
                    [e.step for e in events],
                    [e.lane for e in events],
                    [e.text for e in events],
                    [e.ref_cnt for e in events],
                    [e.state for e in events],
                ],
                "align": "left",
                "fill": {"color": [["#fde0e0" if e.lane == "read" else "white" for e in events]]},
            },
        )
    )
    fig.update_layout(
        title=f"Events of block {story.block}",
        height=min(900, 110 + 21 * max(len(events), 1)),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    return fig


def grid_figure(grid: Grid) -> go.Figure:
    codes = {c: i for i, c in enumerate(CATEGORIES)}
    z = [[codes.get(c) for c in row] for row in grid.categories]
    text = [["" if b is None else str(b) for b in row] for row in grid.blocks]
    columns = [str(grid.first_index + i) for i in range(len(grid.blocks[0]) if grid.blocks else 0)]
    colors = ["#e8eef7", "#f6d28b", "#9fd89f", "#9ec5f0"]
    n = len(colors)
    scale = [[(k + j) / n, c] for k, c in enumerate(colors) for j in (0, 1)]  # discrete bands
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=list(grid.request_ids),
            text=text,
            texttemplate="%{text}",
            customdata=[[c or "-" for c in row] for row in grid.categories],
            hovertemplate="%{y} logical block %{x}: physical block %{text} (%{customdata})"
            "<extra></extra>",
            zmin=-0.5,
            zmax=len(colors) - 0.5,
            colorscale=scale,
            xgap=2,
            ygap=2,
            colorbar={"tickvals": list(range(len(CATEGORIES))), "ticktext": list(CATEGORIES)},
        )
    )
    for r, row in enumerate(grid.blocks):
        for c, block in enumerate(row):
            if block == grid.block:
                fig.add_shape(
                    type="rect",
                    name="focus block",
                    x0=c - 0.5,
                    x1=c + 0.5,
                    y0=r - 0.5,
                    y1=r + 0.5,
                    line={"color": "#d62728", "width": 3},
                )
    fig.update_layout(
        title=f"Block tables at step {grid.step} (logical -> physical; {grid.block} outlined)",
        height=160 + 40 * len(grid.request_ids),
        xaxis={"title": "logical block", "type": "category"},
        yaxis={"type": "category", "autorange": "reversed"},
        margin={"l": 80, "r": 20, "t": 50, "b": 40},
    )
    return fig


def usage_figure(usage: Usage, focus_step: int) -> go.Figure:
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    steps = usage.column("step")
    for name, color in (
        ("blocks_used", "#1f77b4"),
        ("blocks_cached", "#2ca02c"),
        ("blocks_free", "#aaaaaa"),
    ):
        fig.add_trace(
            go.Scatter(
                name=name,
                x=steps,
                y=usage.column(name),
                mode="lines",
                line={"color": color, "shape": "hv"},
                stackgroup="blocks",
            ),
            secondary_y=False,
        )
    hits = [(step, n) for step, n in zip(steps, usage.column("hit_tokens"), strict=True) if n]
    fig.add_trace(  # only the steps with hits: a bar per step would be thousands of rects
        go.Bar(
            name="prefix-hit tokens",
            x=[h[0] for h in hits],
            y=[h[1] for h in hits],
            marker={"color": "#d4a017"},
            width=max(1, len(steps) // 200),
        ),
        secondary_y=True,
    )
    fig.add_vline(x=focus_step, line={"color": "#d62728", "dash": "dot"})
    fig.update_layout(title="KV-cache usage over steps", height=360, margin={"t": 50, "b": 40})
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="blocks", secondary_y=False)
    fig.update_yaxes(title_text="prefix-hit tokens", secondary_y=True)
    return fig
