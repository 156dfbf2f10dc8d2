"""The README and the docs pages: short, linked, and saying how a figure was measured.

mkdocs build --strict (tox -e docs) checks the docs' own links and nav; these tests check
what it does not: the README's links into docs/, its length, and that no page speaks of
when or by whom something was measured instead of how.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
PAGES = sorted((REPO_ROOT / "docs").rglob("*.md"))
# "measured in this session", "a later session", "the development session", ...
WHO_OR_WHEN = re.compile(
    r"\b(this|a later|an earlier|the last|development)\s+session\b|\bsession's (final )?code",
    re.IGNORECASE,
)
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= 150


def test_every_relative_link_of_the_readme_names_a_file():
    targets = [t for t, _ in LINK.findall(README.read_text()) if "://" not in t]
    assert len(targets) >= 20
    missing = [t for t in targets if not (REPO_ROOT / t).exists()]
    assert missing == []


def test_no_page_speaks_of_sessions():
    offenders = [
        f"{page.relative_to(REPO_ROOT)}:{i}: {line.strip()}"
        for page in [README, *PAGES]
        for i, line in enumerate(page.read_text().splitlines(), 1)
        if WHO_OR_WHEN.search(line)
    ]
    assert offenders == []


def test_the_session_pattern_sees_what_it_must():
    assert WHO_OR_WHEN.search("measured in this session's final code")
    assert WHO_OR_WHEN.search("a later session, quiet machine")
    assert WHO_OR_WHEN.search("on the session's final code")
    assert not WHO_OR_WHEN.search("rows of a session share its session_id")
    assert not WHO_OR_WHEN.search("exceed the previous session row; afresh in the same session")
