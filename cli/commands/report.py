"""`schedcheck report`: one self-contained HTML page of a bundle, a run, a campaign or the
nightly (the pages are built by schedcheck.report, which sits on top of the simulator and
is imported only when the command runs; it needs the `report` extra: plotly).

Exit codes: 0 written, 2 bad input (or plotly missing).
"""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path

from schedcheck.cli.commands.common import EXIT_BAD_INPUT, EXIT_OK, add_json_flag, run_guarded
from schedcheck.cli.output import emit_json


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write an HTML page of a bundle, a run, a campaign or the GPU nightly",
        description=(
            "Write one self-contained HTML page (plotly's JS inlined: it opens with no "
            "network). INPUT is a bundle (the finding: schedule timeline, the KV story of "
            "the violating block, block tables, KV usage), a `schedcheck replay --out DIR "
            "--json` output saved to a file (the run over simulated time), a campaign "
            "directory (`schedcheck fuzz --out DIR`), or a nightly output directory "
            "(nightly.json). Campaign and nightly pages link to a page per bundle, written "
            "in OUT-bundles/."
        ),
        epilog="Exit codes: 0 written, 2 bad input. Needs the `report` extra (plotly).",
    )
    parser.add_argument(
        "input", metavar="INPUT", help="BUNDLE | RUN_JSON | CAMPAIGN_DIR | NIGHTLY_DIR"
    )
    parser.add_argument(
        "-o",
        "--out",
        metavar="OUT.html",
        default=None,
        help="where to write the page (default: INPUT/report.html, or RUN_JSON with .html)",
    )
    parser.add_argument("--open", action="store_true", help="open the page in a browser")
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def _run(args: argparse.Namespace) -> int:
    if not has_plotly():  # the pages import it lazily, deep inside: ask once, up front
        print(
            "schedcheck: error: report needs plotly: pip install 'schedcheck[report]'",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    from schedcheck.report.command import default_out, write_report

    source = Path(args.input)
    out = Path(args.out) if args.out else default_out(source)
    try:
        written = write_report(source, out)
    except (ValueError, KeyError, TypeError) as exc:
        if type(exc).__name__ == "TraceError":
            raise
        why = str(exc) if isinstance(exc, ValueError) else f"{args.input}: not usable: {exc!r}"
        print(f"schedcheck: error: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        emit_json({"report": str(written.resolve()), "bytes": written.stat().st_size})
    else:
        print(f"report written to {written.resolve()} ({written.stat().st_size / 1e6:.1f} MB)")
    if args.open:
        webbrowser.open(written.resolve().as_uri())
    return EXIT_OK


def has_plotly() -> bool:
    try:
        import plotly.graph_objects  # noqa: F401
    except ImportError:
        return False
    return True
