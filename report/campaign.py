"""A fuzz campaign's directory, as `schedcheck fuzz --out DIR` leaves it.

DIR/campaign.json          the campaign's JSON report (fuzz --json), with "progress"
                           [[elapsed_s, examples], ...] and "configs" {knob: {value: n}}
DIR/w0-r3-raw/             a bundle: the first failing example, as found
DIR/w0-r3-shrunk/          a bundle: the finding, shrunk (scenario.json beside)
DIR/w0-r1-clean-failure/   a bundle: the engine without the mutant fails too
DIR/campaign-N/            --continue-past-findings: one campaign directory each
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedcheck.traces.bundle import SCHEDULE_FILES, read_bundle


@dataclass(frozen=True)
class CampaignBundle:
    path: Path
    role: str  # raw | shrunk | clean-failure | bundle
    headline: str
    requests: int


@dataclass
class Campaign:
    path: Path
    report: dict[str, Any] | None
    bundles: list[CampaignBundle] = field(default_factory=list)


def is_bundle(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in SCHEDULE_FILES)


def read_campaigns(root: Path) -> list[Campaign]:
    """The campaign at `root`, or each campaign-N under it (continue-past-findings)."""
    nested = sorted(p for p in root.glob("campaign-*") if p.is_dir())
    return [read_campaign(p) for p in nested] if nested else [read_campaign(root)]


def read_campaign(root: Path) -> Campaign:
    report = None
    if (root / "campaign.json").is_file():
        try:
            report = json.loads((root / "campaign.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{root / 'campaign.json'}:{exc.lineno}: not valid JSON: {exc.msg}"
            ) from exc
    bundles = [_entry(p) for p in sorted(root.iterdir()) if is_bundle(p)]
    return Campaign(root, report, bundles)


def _entry(path: Path) -> CampaignBundle:
    bundle = read_bundle(path)
    role = next((r for r in ("shrunk", "raw", "clean-failure") if path.name.endswith(r)), "bundle")
    v = bundle.violations[0] if bundle.violations else {}
    headline = (
        f"step {v.get('step')}: {v.get('invariant')}: {v.get('message')}" if v else "no violation"
    )
    return CampaignBundle(path, role, headline, int(bundle.summary.get("requests", 0)))
