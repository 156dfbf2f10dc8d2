"""The nightly job's outputs: JUnit XML, JSON, a markdown summary and the closing table.

One result per (bundle, backend): its verdict, what the bundle expected, whether that is
a failure, and the cost of the replay over the bare model forward:

    cost = replay_s / forward_s     replay_s: the whole replay (planning, tensors, checks)
                                    forward_s: model forward + sampling of the same steps
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

NOT_RUN = ("refused", "skipped")  # a backend that cannot take it; the time budget was spent


@dataclass(frozen=True)
class Result:
    bundle: str
    backend: str
    verdict: str  # consistent | misaligned | near-tie | refused | error | skipped
    expected: str  # consistent | misaligned | recorded (violations, not pinned)
    failed: bool
    message: str
    replay_s: float = 0.0
    forward_s: float = 0.0
    baseline_s: float = 0.0
    tokens: int = 0
    report: dict[str, Any] | None = None

    @property
    def cost(self) -> float:
        return self.replay_s / self.forward_s if self.forward_s > 0 else 0.0


def write_junit(path: Path, results: Sequence[Result]) -> None:
    suite = ET.Element(
        "testsuite",
        name="schedcheck-gpu-nightly",
        tests=str(len(results)),
        failures=str(sum(r.failed for r in results)),
        skipped=str(sum(r.verdict in NOT_RUN for r in results)),
        time=f"{sum(r.replay_s + r.baseline_s for r in results):.3f}",
    )
    for r in results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=r.backend,
            name=r.bundle,
            time=f"{r.replay_s + r.baseline_s:.3f}",
        )
        if r.verdict in NOT_RUN:
            ET.SubElement(case, "skipped", message=r.message)
        elif r.failed:
            ET.SubElement(
                case, "failure", message=f"{r.verdict}, expected {r.expected}"
            ).text = r.message
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def write_json(path: Path, results: Sequence[Result], meta: dict[str, Any]) -> None:
    rows = [{**asdict(r), "cost": r.cost} for r in results]
    path.write_text(json.dumps({"meta": meta, "results": rows}, indent=1) + "\n", encoding="utf-8")


def table(results: Sequence[Result]) -> list[str]:
    """Markdown rows: per backend, bundles consistent / misaligned / near-tie and the cost."""
    lines = [
        "| backend | bundles | consistent | misaligned | near-tie | refused/error/skipped | "
        "failures | replay / bare forward |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend in dict.fromkeys(r.backend for r in results):
        rows = [r for r in results if r.backend == backend]
        count = {
            v: sum(r.verdict == v for r in rows) for v in ("consistent", "misaligned", "near-tie")
        }
        other = sum(r.verdict in (*NOT_RUN, "error") for r in rows)
        ran = [r for r in rows if r.forward_s > 0]
        replay, forward = sum(r.replay_s for r in ran), sum(r.forward_s for r in ran)
        cost = f"{replay / forward:.2f}x ({replay:.2f} s / {forward:.2f} s)" if forward else "-"
        lines.append(
            f"| {backend} | {len(rows)} | {count['consistent']} | "
            f"{count['misaligned']} | {count['near-tie']} | {other} | "
            f"{sum(r.failed for r in rows)} | {cost} |"
        )
    return lines


def write_markdown(path: Path, results: Sequence[Result], meta: dict[str, Any]) -> None:
    lines = [
        "# schedcheck GPU nightly",
        "",
        ", ".join(f"{k}: {v}" for k, v in meta.items()),
        "",
        *table(results),
        "",
    ]
    failures = [r for r in results if r.failed]
    if failures:
        lines += ["## Failures", ""]
        lines += [
            f"- `{r.bundle}` on {r.backend}: {r.verdict} (expected {r.expected}): {r.message}"
            for r in failures
        ]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
