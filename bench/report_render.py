"""How long a large finding's report takes to build and to render in a browser, and its size.

Render time: wall time from navigation until every chart is drawn (grows with the
machine's load), and the page's main-thread CPU time until then (DevTools Performance
metrics in thread ticks: what it costs on a free core).

The large finding: the bundled Mooncake slice (first 200 requests) through the reference
engine with mutant stale-cache-hit and 1,800 KV blocks: the stale hit is read at step
3,935 (87 requests), so the bundle holds 3,936 steps. Side by side, the page of the small
regression bundle reference_hashed_stale_cache_hit (7 steps): what plotly.js alone costs.

    python bench/report_render.py [--repeat 3] [--json]

Needs the `report` and `report-browser` extras and the system Chromium (report/browser.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from schedcheck.report.browser import load
from schedcheck.report.command import write_report

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "regressions" / "bundles" / "reference_hashed_stale_cache_hit"
LARGE_ARGS = ["--mutant", "stale-cache-hit", "--num-gpu-blocks", "1800"]


def make_large(out: Path) -> Path:
    cmd = [sys.executable, "-m", "schedcheck.cli", "replay", *LARGE_ARGS, "--out", str(out)]
    code = subprocess.run(cmd, capture_output=True, text=True, check=False).returncode
    assert code == 1, f"expected a finding (exit 1), got {code}"
    return out


def measure(bundle: Path, work: Path, repeat: int) -> dict[str, object]:
    page = work / f"{bundle.name}.html"
    started = time.perf_counter()
    write_report(bundle, page)
    build_s = time.perf_counter() - started
    loads = [load(page) for _ in range(repeat)]
    assert all(not x.errors for x in loads), [x.errors for x in loads]
    renders = [round(x.render_s, 2) for x in loads]
    cpu = [round(x.main_thread_s, 2) for x in loads]
    steps = json.loads((bundle / "summary.json").read_text())["steps"]
    return {
        "bundle": bundle.name,
        "steps": steps,
        "html_mb": round(page.stat().st_size / 1e6, 2),
        "build_s": round(build_s, 2),
        "render_s": renders,
        "render_median_s": statistics.median(renders),
        "main_thread_cpu_s": cpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="browser loads per page")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        large = make_large(work / "mooncake-stale-cache-hit")
        rows = []
        for _ in range(args.repeat):  # interleaved: the same load for both
            rows.append(measure(large, work, 1))
            rows.append(measure(SMALL, work, 1))
    out = {"uptime": Path("/proc/loadavg").read_text().split()[:3], "runs": rows}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"load average {' '.join(out['uptime'])}")
        for r in rows:
            print(
                f"{r['bundle']}: {r['steps']} steps, {r['html_mb']} MB, build {r['build_s']} s, "
                f"render {r['render_s']} s (main thread CPU {r['main_thread_cpu_s']} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
