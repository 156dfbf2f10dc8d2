"""Every `schedcheck ...` command written in the README or a docs page parses.

The tutorial's commands are run (test_tutorial.py); the others name traces, engines or
machines a test cannot have, but their flags must still exist: each command line of a
code block is given to the real argparse parser, so a renamed or removed flag fails here.
Lines with placeholders (`[...]`, `A|B`, `...`) are left out.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from schedcheck.cli.entry import build_parser

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
ENV_ASSIGNMENT = re.compile(r"^[A-Z_]+=\S*$")


def command_lines(text: str) -> list[str]:
    """`schedcheck` command lines of the fenced blocks, continuations joined."""
    out = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.removeprefix("$ ").split(" #")[0].split(" && ")[-1].strip()
            words = line.split()
            while words and ENV_ASSIGNMENT.match(words[0]):
                words = words[1:]
            if words and words[0].endswith("schedcheck") and words[0] != "python":
                out.append(" ".join(words))
    return [c for c in out if not re.search(r"[\[|]|\.\.\.|[A-Z]{3,}\b(?!\.)", c)]


def all_commands() -> list[tuple[str, str]]:
    return [
        (str(page.relative_to(REPO_ROOT)), command)
        for page in PAGES
        for command in command_lines(page.read_text())
    ]


def test_the_pages_hold_enough_commands_to_check():
    assert len(all_commands()) >= 25


def test_placeholders_and_env_are_handled():
    text = "```bash\nPYTHONPATH=x schedcheck fuzz --seed 0   # c\nschedcheck replay TRACE\n```\n"
    assert command_lines(text) == ["schedcheck fuzz --seed 0"]


@pytest.mark.parametrize(("page", "command"), all_commands())
def test_the_command_parses(page: str, command: str):
    argv = shlex.split(command)[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{page}: `{command}` does not parse (exit {exc.code})")
