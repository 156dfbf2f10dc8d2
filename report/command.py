"""`schedcheck report INPUT -o OUT.html`: tell what INPUT is, write its page.

    INPUT                                  page
    a bundle (schedule.jsonl[.xz])         the finding (finding_page.py)
    a `replay --out DIR --json` output     the run, from the bundle it names (run_page.py)
    a directory with nightly.json          the GPU nightly (nightly_page.py)
    a campaign directory (bundles,         the campaign (campaign_page.py)
      campaign.json, or campaign-N/)
Campaign and nightly pages link to one finding page per bundle, written beside OUT in
OUT-bundles/ (a bundle's own page is its report.html when OUT is not given).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from schedcheck.report.campaign import is_bundle, read_campaigns
from schedcheck.report.nightly import read_nightly
from schedcheck.traces.bundle import read_bundle


def kind_of(path: Path) -> str:
    """bundle | run | nightly | campaign; raises ValueError saying why none fits."""
    if path.is_file():
        return "run"
    if not path.is_dir():
        raise ValueError(f"{path}: no such file or directory")
    if is_bundle(path):
        return "bundle"
    if (path / "nightly.json").is_file():
        return "nightly"
    if (path / "campaign.json").is_file() or any(
        is_bundle(p) or p.name.startswith("campaign-") for p in path.iterdir()
    ):
        return "campaign"
    raise ValueError(
        f"{path}: not a bundle, a campaign directory (bundles or campaign.json) or a nightly "
        "output (nightly.json)"
    )


def default_out(path: Path) -> Path:
    if path.is_file():
        return path.with_suffix(".html")
    return path / "report.html"


def write_report(path: Path, out: Path) -> Path:
    """Write INPUT's page to `out` (and the finding pages it links to); returns `out`."""
    kind = kind_of(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "bundle":
        text = bundle_page(path)
    elif kind == "run":
        text = _run_page(path)
    elif kind == "nightly":
        from schedcheck.report.nightly_page import nightly_page

        nightly = read_nightly(path)
        found = [(r["bundle"], nightly.bundle_path(r["bundle"])) for r in nightly.results]
        verify = nightly.verify_reports()
        links = write_bundle_pages([(n, p) for n, p in found if p is not None], out, verify)
        text = nightly_page(nightly, links)
    else:
        from schedcheck.report.campaign_page import campaign_page

        campaigns = read_campaigns(path)
        paths = [b.path for c in campaigns for b in c.bundles]
        links = write_bundle_pages([(str(p), p) for p in paths], out)
        text = campaign_page(campaigns, links)
    out.write_text(text, encoding="utf-8")
    return out


def bundle_page(path: Path, verify: list[dict[str, Any]] | None = None) -> str:
    """A bundle's finding page; `verify`: GPU verifications from elsewhere (the nightly's)."""
    from schedcheck.report.finding import build_finding
    from schedcheck.report.finding_page import finding_page

    finding = build_finding(path)
    finding.verify += verify or []
    return finding_page(finding)


def write_bundle_pages(
    bundles: Iterable[tuple[str, Path]],
    out: Path,
    verify: Mapping[str, list[dict[str, Any]]] | None = None,
) -> dict[str, str]:
    """One finding page per distinct bundle in OUT-bundles/; key -> href relative to OUT."""
    folder = out.parent / f"{out.stem}-bundles"
    links: dict[str, str] = {}
    pages: dict[Path, str] = {}
    for key, path in bundles:
        resolved = path.resolve()
        if resolved not in pages:
            name = f"{len(pages):03d}-{_safe(path.name)}.html"
            folder.mkdir(parents=True, exist_ok=True)
            page = bundle_page(path, (verify or {}).get(key))
            (folder / name).write_text(page, encoding="utf-8")
            pages[resolved] = f"{folder.name}/{name}"
        links[key] = pages[resolved]
    return links


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80]


def _run_page(path: Path) -> str:
    from schedcheck.report.run_page import run_page

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a `schedcheck replay --json` output: {exc}") from exc
    if not isinstance(data, dict) or "fingerprint" not in data:
        raise ValueError(f"{path}: not a `schedcheck replay --json` output (no fingerprint)")
    bundle = data.get("bundle")
    if not bundle:
        raise ValueError(
            f"{path}: the run wrote no bundle; rerun it with `schedcheck replay ... --out DIR "
            "--json` so its schedule is kept"
        )
    return run_page(read_bundle(bundle), data)
