"""MkDocs hook: feature pages that other branches add land in the nav when they exist.

Each feature keeps its own page at docs/<topic>.md. The nav (mkdocs.yml) lists the pages of
this site's structure; the pages below are placed in their section here, once present, so
the site builds with --strict whichever of them a checkout has. A page under docs/ that is
neither in mkdocs.yml nor here still fails the strict build (not in the nav).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# page -> (nav section, title), in the order they appear in their section
FEATURE_PAGES: dict[str, tuple[str, str]] = {
    "your-engine.md": ("How-to guides", "Engine capabilities and conformance"),
    "reports.md": ("How-to guides", "Read a finding's report"),
    "campaigns.md": ("How-to guides", "Campaigns on Ray clusters, and sweeps"),
    "sglang.md": ("How-to guides", "Drive SGLang"),
    "bisect.md": ("How-to guides", "Bisect a finding across vLLM releases"),
    "vllm-surface.md": ("Reference", "vLLM's scheduler options"),
    "mutants.md": ("Explanation", "Mutants outside the engine"),
    "speculative-and-hybrid.md": ("Explanation", "Speculative decoding and hybrid models"),
    "performance.md": ("Results", "Performance"),
}


def present_feature_pages(docs_dir: Path) -> list[tuple[str, str, str]]:
    """(section, title, page) of each feature page that exists, in FEATURE_PAGES order."""
    return [
        (section, title, page)
        for page, (section, title) in FEATURE_PAGES.items()
        if (docs_dir / page).is_file()
    ]


def on_config(config: Any) -> Any:
    nav = config["nav"]
    listed = {value for entry in _walk(nav) for value in entry.values() if isinstance(value, str)}
    for section, title, page in present_feature_pages(Path(config["docs_dir"])):
        if page in listed:
            continue
        for entry in nav:
            if section in entry:
                entry[section].append({title: page})
                break
        else:
            raise ValueError(f"docs/hooks.py: no nav section {section!r} for {page}")
    return config


def _walk(nav: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for entry in nav:
        if isinstance(entry, dict):
            out.append(entry)
            for value in entry.values():
                if isinstance(value, list):
                    out.extend(_walk(value))
    return out
