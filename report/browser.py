"""A report page in a real headless browser: the system Chromium, driven by playwright.

Used by the browser test (tests/report/test_report_browser.py, tox -e report-browser) and
bench/report_render.py. Nothing is downloaded: playwright is pointed at the Chromium the
system has (Debian's `chromium` package; or $SCHEDCHECK_CHROMIUM).

    load(page)  ->  Loaded(render_s, errors, traces, ...)
        render_s   from navigation to every plotly div drawn (its _fullLayout and SVG exist):
                   wall time, so it grows with the machine's load
        main_thread_s  the CPU time of the page's main-thread tasks until then (DevTools
                   Performance metrics in thread ticks): what the render costs on a free core
        errors     console errors and uncaught page errors, in order
        traces     div id -> number of traces
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ALL_DRAWN = """() => Array.from(document.querySelectorAll('.plotly-graph-div'))
    .every(d => d._fullLayout && d.querySelector('.main-svg'))"""
TRACES = """() => Object.fromEntries(Array.from(document.querySelectorAll('.plotly-graph-div'))
    .map(d => [d.id, d.data.length]))"""
TIMEOUT_MS = 120_000


def chromium_path() -> str | None:
    """$SCHEDCHECK_CHROMIUM, else chromium or chromium-browser on PATH."""
    env = os.environ.get("SCHEDCHECK_CHROMIUM")
    if env:
        return env
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Loaded:
    render_s: float
    errors: list[str]
    traces: dict[str, int]
    facts: dict[str, Any] = field(default_factory=dict)  # answers to `ask`
    main_thread_s: float = 0.0  # CPU time of the page's main-thread tasks (load-independent)


def load(
    page_path: Path,
    ask: dict[str, str] | None = None,
    screenshot: Path | None = None,
    viewport: tuple[int, int] = (1280, 900),
) -> Loaded:
    """Open the page, wait until every chart is drawn, evaluate each JS expression of `ask`."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    assert executable is not None, "no Chromium: apt-get install chromium (or $SCHEDCHECK_CHROMIUM)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable", {"timeDomain": "threadTicks"})
            started = time.perf_counter()
            page.goto(page_path.resolve().as_uri(), wait_until="load", timeout=TIMEOUT_MS)
            page.wait_for_function(ALL_DRAWN, timeout=TIMEOUT_MS)
            render_s = time.perf_counter() - started
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            facts = {name: page.evaluate(js) for name, js in (ask or {}).items()}
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=False)
            loaded = Loaded(render_s, errors, page.evaluate(TRACES), facts)
            loaded.main_thread_s = float(metrics.get("TaskDuration", 0.0))
            return loaded
        finally:
            browser.close()
