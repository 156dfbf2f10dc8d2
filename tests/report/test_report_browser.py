"""A real finding's page in headless Chromium (the system's, through playwright).

Runs in `tox -e report-browser` (SCHEDCHECK_REQUIRE_BROWSER=1: a missing browser fails
there); elsewhere it is skipped when playwright or Chromium is missing. With
SCHEDCHECK_REPORT_SCREENSHOT=PATH it also writes the screenshot docs/reports.md shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from schedcheck.report.browser import chromium_path

REQUIRED = os.environ.get("SCHEDCHECK_REQUIRE_BROWSER") == "1"
try:
    import playwright  # noqa: F401

    MISSING = "" if chromium_path() else "no Chromium on PATH"
except ImportError:
    MISSING = "playwright is not installed (the report-browser extra)"
if MISSING and REQUIRED:
    raise RuntimeError(f"SCHEDCHECK_REQUIRE_BROWSER=1 but {MISSING}")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)

ROOT = Path(__file__).resolve().parents[2]
STALE = ROOT / "tests" / "regressions" / "bundles" / "reference_hashed_stale_cache_hit"
VLLM = ROOT / "tests" / "vllm" / "bundles" / "0.6.0-bm2-shadow-kv-read"
ASK = {
    "violation_y": "() => document.getElementById('timeline').data.at(-1).y",
    "highlight": """() => document.getElementById('timeline').layout.shapes
        .filter(s => s.name === 'violating request').map(s => [s.y0, s.y1])""",
    "bold_ticks": """() => Array.from(document.querySelectorAll('#timeline .ytick text'))
        .filter(t => t.querySelector('tspan[style*="bold"]')).map(t => t.textContent)""",
    "read_x": "() => document.getElementById('kv-story').data.at(-1).x",
}


def _page(bundle: Path, tmp_path: Path) -> Path:
    from schedcheck.cli.entry import main

    out = tmp_path / f"{bundle.name}.html"
    assert main(["report", str(bundle), "-o", str(out)]) == 0
    return out


def test_a_finding_renders_without_errors_with_its_charts_and_highlight(tmp_path):
    from schedcheck.report.browser import load

    loaded = load(_page(STALE, tmp_path), ASK)
    assert loaded.errors == []
    assert loaded.traces == {
        "timeline": 8,  # 7 kinds of marks + the violation
        "kv-story": 8,  # 3 states + owners, engine, content, writes, read
        "kv-story-table": 1,
        "block-grid": 1,
        "usage": 4,
    }
    assert loaded.facts["violation_y"] == ["r1"]
    assert loaded.facts["highlight"] == [[0.5, 1.5]]  # r1's row (rows r0, r1)
    assert loaded.facts["bold_ticks"] == ["▶ r1"]
    assert loaded.facts["read_x"] == [6]


def test_a_vllm_finding_renders_too(tmp_path):
    """vLLM 0.6.0's block manager v2 reads another request's KV (vllm#7822); the page of that
    finding is the screenshot of docs/reports.md."""
    from schedcheck.report.browser import load

    shot = os.environ.get("SCHEDCHECK_REPORT_SCREENSHOT")
    loaded = load(
        _page(VLLM, tmp_path),
        ASK,
        screenshot=Path(shot) if shot else None,
        viewport=(1100, 1290),
    )
    assert loaded.errors == []
    assert loaded.traces["timeline"] == 8 and loaded.traces["kv-story"] == 8
    assert loaded.facts["violation_y"] == ["r5"] and loaded.facts["bold_ticks"] == ["▶ r5"]
    assert loaded.facts["read_x"] == [9]
