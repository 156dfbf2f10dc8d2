"""The tutorial's commands, run in order in a fresh directory, print what the page shows.

Every ```console block of docs/tutorial.md is a shell session: a `$ COMMAND` line, then
the output it must print (`...` matches anything, as in doctest's ELLIPSIS); `$ echo $?`
prints the previous command's exit status. ```bash blocks (clone, install) are not run.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
CONSOLE_BLOCK = re.compile(r"^```console\n(.*?)^```$", re.MULTILINE | re.DOTALL)
CHECKER = doctest.OutputChecker()


def sessions(text: str) -> list[tuple[str, str]]:
    """(command, expected output) in page order."""
    out: list[tuple[str, str]] = []
    for block in CONSOLE_BLOCK.findall(text):
        for chunk in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
            command, _, expected = chunk.partition("\n")
            out.append((command, expected))
    return out


def test_the_page_has_the_commands_it_promises():
    commands = [c for c, _ in sessions(TUTORIAL.read_text())]
    assert len(commands) == 11
    assert commands[0] == "schedcheck replay --max-requests 20"
    assert sum(c.startswith("schedcheck verify") for c in commands) == 1


def test_the_parser_reads_outputs_and_ellipses():
    text = "```console\n$ a\nx ... y\n$ echo $?\n1\n```\n"
    assert sessions(text) == [("a", "x ... y\n"), ("echo $?", "1\n")]
    assert CHECKER.check_output("x ... y\n", "x 12 s y\n", doctest.ELLIPSIS)
    assert not CHECKER.check_output("x ... y\n", "x 12 s z\n", doctest.ELLIPSIS)


def test_every_tutorial_command_prints_what_the_page_shows(tmp_path):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("COLUMNS", None)
    status = 0
    for command, expected in sessions(TUTORIAL.read_text()):
        if command == "echo $?":
            got = f"{status}\n"
        else:
            run = subprocess.run(
                command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True
            )
            status, got = run.returncode, run.stdout
        assert CHECKER.check_output(expected, got, doctest.ELLIPSIS), (
            f"$ {command}\n--- the page shows:\n{expected}--- it printed:\n{got}"
        )
