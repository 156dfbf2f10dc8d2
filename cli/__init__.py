"""The `schedcheck` command line: the entry point (`main.py`) and one module per verb
(`commands/`). The only room that parses arguments or prints."""

from schedcheck.cli.entry import main

__all__ = ["main"]
