"""The `schedcheck` command line: one subcommand module per verb (cli/commands/)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from schedcheck.cli.output import engine_output_to_stderr

# verb -> module under schedcheck.cli.commands exposing `register(subparsers)`.
COMMANDS: tuple[str, ...] = (
    "trace",
    "replay",
    "fuzz",
    "mutants",
    "verify",
    "diff",
    "sweep",
    "report",
    "conformance",
    "bisect",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="schedcheck",
        description=(
            "Deterministic simulation testing of LLM-serving schedulers and KV-cache "
            "managers: replay traces through an engine under test, check every step, "
            "fuzz interleavings, verify suspicious schedules on real attention kernels."
        ),
        epilog="Exit codes: 0 clean, 1 violation found, 2 bad input or usage, 3 liveness failure.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for verb in COMMANDS:
        try:
            module = importlib.import_module(f"schedcheck.cli.commands.{verb}")
        except ModuleNotFoundError as exc:
            if exc.name != f"schedcheck.cli.commands.{verb}":
                raise
            continue  # verb not built yet
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "json", False) is True:  # standard output carries the JSON alone
            with engine_output_to_stderr():
                return int(args.run(args))
        return int(args.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
