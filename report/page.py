"""One self-contained HTML page: plotly's JS inlined once, then sections of figures and tables.

No network: the page carries plotly.js itself (about 4.7 MB), so it opens from a file, a
CI artifact or a mail attachment. Figures are plotly's own HTML (`Figure.to_html` without
the library); tables and the header are plain HTML, escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table.kv td, table.rows td, table.rows th {
  padding: 3px 8px; vertical-align: top; text-align: left; }
table.kv td:first-child { font-weight: 600; white-space: nowrap; }
table.rows { border-collapse: collapse; } table.rows td, table.rows th { border: 1px solid #ddd; }
tr.bad td { background: #fde0e0; }
code { background: #f4f4f4; padding: 1px 4px; }
p.note { color: #555; }
"""


@dataclass(frozen=True)
class Section:
    heading: str
    body: str  # HTML


def figure(fig: go.Figure, div_id: str) -> str:
    """A figure's div and script (plotly.js itself is in the page head)."""
    return fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False}
    )


def kv_table(rows: Sequence[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><td>{html.escape(k)}</td><td>{_value(k, v)}</td></tr>" for k, v in rows)
    return f'<table class="kv">{cells}</table>'


def _value(key: str, value: str) -> str:
    text = html.escape(value)
    return f"<code>{text}</code>" if key in ("reproduce", "fingerprint") else text


def rows_table(
    columns: Sequence[str], rows: Sequence[Sequence[object]], bad: Sequence[bool] = ()
) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for i, row in enumerate(rows):
        cls = ' class="bad"' if i < len(bad) and bad[i] else ""
        cells = "".join(f"<td>{_cell(v)}</td>" for v in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f'<table class="rows"><tr>{head}</tr>{"".join(body)}</table>'


def _cell(value: object) -> str:
    if isinstance(value, Link):
        return f'<a href="{html.escape(value.href)}">{html.escape(value.text)}</a>'
    return html.escape("" if value is None else str(value))


@dataclass(frozen=True)
class Link:
    text: str
    href: str


def note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def render(title: str, sections: Sequence[Section]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for section in sections:
        parts.append(f"<section><h2>{html.escape(section.heading)}</h2>{section.body}</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
