"""CLI pieces every command that reads a trace shares (`trace`, `replay`, ...).

add_trace_input_args(parser)   TRACE, --from, --start-s, --duration-s, --max-requests,
                               --time-scale
open_trace(args)               -> Iterator[TraceRequest] (lazy; TraceError as reached)
add_json_flag(parser)          --json
run_guarded(fn)                wraps a command: TraceError -> `FILE:LINE: FIELD: what` on
                               stderr, exit 2, no traceback; the same for usage and
                               file errors
progress(iterable, ...)        a tqdm bar on stderr, only when it is a terminal
write_trace_output(path, ...)  writes a trace atomically ("-" = stdout)
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from schedcheck.traces import FORMATS, TraceError, TraceRequest, iter_trace, write_trace

EXIT_OK = 0
EXIT_BAD_INPUT = 2
T = TypeVar("T")
Command = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """Bad command-line usage found after parsing; printed as `schedcheck: error: ...`, exit 2."""


def add_trace_input_args(
    parser: argparse.ArgumentParser, *, required: bool = False, metavar: str = "TRACE"
) -> None:
    """The trace positional (dest `trace`) and the format/window/time-scale options."""
    parser.add_argument(
        "trace",
        metavar=metavar,
        nargs=None if required else "?",
        help="trace file: our JSONL, or a Mooncake JSONL / Azure 2023 CSV / BurstGPT CSV; "
        "a .xz or .gz file is read decompressed",
    )
    group = parser.add_argument_group("trace input")
    group.add_argument(
        "--from",
        dest="trace_format",
        choices=FORMATS,
        default=None,
        help="the file's format (default: told from the extension and first line)",
    )
    group.add_argument(
        "--start-s",
        type=non_negative_float,
        default=None,
        metavar="S",
        help="skip requests before S seconds into the source trace (from its first request)",
    )
    group.add_argument(
        "--duration-s",
        type=non_negative_float,
        default=None,
        metavar="S",
        help="keep only requests in [start, start + S) of the source trace's seconds",
    )
    group.add_argument(
        "--max-requests",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="keep at most the first N requests of the window",
    )
    group.add_argument(
        "--time-scale",
        type=positive_finite_float,
        default=1.0,
        metavar="F",
        help="multiply every gap (arrival, abort, think) by F: 0.5 = twice the load "
        "(default 1.0); the first kept request arrives at 0.0",
    )


def open_trace(args: argparse.Namespace) -> Iterator[TraceRequest]:
    """The requests that `add_trace_input_args`' options select (lazy)."""
    if args.trace is None:
        raise UsageError("a TRACE file is required")
    return iter_trace(
        args.trace,
        args.trace_format,
        time_scale=args.time_scale,
        start_s=args.start_s,
        duration_s=args.duration_s,
        max_requests=args.max_requests,
    )


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """`--json` (dest `json`): machine-readable output on stdout, no progress bar."""
    parser.add_argument(
        "--json", action="store_true", help="print machine-readable JSON (and no progress bar)"
    )


def run_guarded(fn: Command) -> Command:
    """`fn` with bad input answered by one line on stderr and exit 2, never a traceback."""

    @functools.wraps(fn)
    def guarded(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except TraceError as exc:
            print(exc, file=sys.stderr)
        except UsageError as exc:
            print(f"schedcheck: error: {exc}", file=sys.stderr)
        except BrokenPipeError:
            raise  # the CLI's main treats a closed pipe as a clean exit
        except OSError as exc:
            print(f"{exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    return guarded


def progress(
    iterable: Iterable[T], *, enabled: bool = True, desc: str = "", unit: str = "req"
) -> Iterable[T]:
    """`iterable` with a tqdm bar on stderr when `enabled` and stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        return iterable
    from tqdm import tqdm  # only when drawn

    return tqdm(iterable, desc=desc, unit=unit, file=sys.stderr, leave=False, mininterval=0.5)


def write_trace_output(path: str, requests: Iterable[TraceRequest]) -> int:
    """Write a trace to `path` ("-": stdout); a file appears only once complete."""
    if path == "-":
        return write_trace(sys.stdout, requests)
    temp_path = f"{path}.tmp-{os.getpid()}"  # beside the target, so os.replace is atomic
    try:
        with open(temp_path, "x", encoding="utf-8") as fh:
            count = write_trace(fh, requests)
        os.replace(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise
    return count


def non_negative_float(text: str) -> float:
    return _number(text, float, lambda v: v >= 0, "a number >= 0")


def positive_float(text: str) -> float:
    """A number > 0; `inf` allowed (e.g. an infinite rate)."""
    return _number(text, float, lambda v: v > 0, "a number > 0")


def positive_finite_float(text: str) -> float:
    return _number(text, float, lambda v: 0 < v < math.inf, "a finite number > 0")


def non_negative_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 1, "an integer >= 1")


def _number(text: str, kind: Callable[[str], T], ok: Callable[[T], bool], what: str) -> T:
    """argparse type: `text` parsed by `kind`, refused (exit 2) unless `ok`."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if not ok(value):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value
