"""The GPU nightly's output directory (gpu/nightly.py): nightly.json and its bundles.

    OUT/nightly.json    {"meta": {...}, "results": [{"bundle", "backend", "verdict",
                         "expected", "failed", "message", "replay_s", ...}, ...]}
    OUT/scenarios/      the hand-built scenario bundles it wrote
Bundle paths in nightly.json are as the job saw them (relative to where it ran, usually the
repository root): resolved against the working directory, then OUT, then OUT's parent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedcheck.report.campaign import is_bundle

VERDICTS = ("consistent", "misaligned", "near-tie", "refused", "error", "skipped")


@dataclass
class Nightly:
    path: Path
    meta: dict[str, Any]
    results: list[dict[str, Any]]

    def backends(self) -> list[str]:
        return list(dict.fromkeys(r["backend"] for r in self.results))

    def counts(self) -> dict[str, dict[str, int]]:
        """backend -> verdict -> number of bundles (VERDICTS order)."""
        out: dict[str, dict[str, int]] = {}
        for backend in self.backends():
            rows = [r for r in self.results if r["backend"] == backend]
            out[backend] = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
        return out

    def verify_reports(self) -> dict[str, list[dict[str, Any]]]:
        """bundle -> the verify reports of its backends (as `verify --json` writes them)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for r in self.results:
            if isinstance(r.get("report"), dict) and "verdict" in r["report"]:
                out.setdefault(r["bundle"], []).append({**r["report"], "file": "nightly.json"})
        return out

    def bundle_path(self, name: str) -> Path | None:
        for base in (Path.cwd(), self.path, self.path.parent):
            candidate = Path(name) if Path(name).is_absolute() else base / name
            if is_bundle(candidate):
                return candidate
        return None


def read_nightly(root: Path) -> Nightly:
    path = root / "nightly.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ValueError(f'{path}: not a nightly output (no "results" list)')
    return Nightly(root, dict(data.get("meta") or {}), list(data["results"]))
