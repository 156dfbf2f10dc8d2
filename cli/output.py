"""Machine output stays machine-readable: with `--json`, standard output carries the JSON alone.

Engines under test print and log wherever they like: vLLM's logger holds the `sys.stdout`
of its import, SGLang's radix tree prints its `pretty_print()` on a failed allocation, C
code writes to file descriptor 1. While a `--json` command runs::

    fd 1 (and sys.stdout) ──► standard error       what the engines print or log
    emit_json(obj)        ──► the real stdout      the command's JSON, nothing else

so `schedcheck fuzz --json | python -m json.tool` parses whatever the engine logs, in
every env and when an env's `bin/schedcheck` is run directly. Worker processes inherit
the redirected descriptor.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

_machine: TextIO | None = None  # the real standard output while engines' goes to stderr


@contextlib.contextmanager
def engine_output_to_stderr() -> Iterator[None]:
    """Everything written to standard output inside goes to standard error, except what
    `emit_json` writes."""
    global _machine
    real = sys.stdout
    real.flush()
    fd = _fileno(real)
    saved = os.dup(fd) if fd is not None else None
    if fd is not None and saved is not None:
        os.dup2(sys.stderr.fileno(), fd)
    _machine = real if saved is None else os.fdopen(saved, "w", encoding="utf-8")
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = real
        real.flush()  # what engines' handlers buffered: still to standard error
        _machine.flush()
        if fd is not None and saved is not None:
            os.dup2(saved, fd)
            _machine.close()
        _machine = None


def emit_json(obj: Any, **dump_options: Any) -> None:
    """Write `obj` as JSON and a newline to the real standard output."""
    stream = _machine if _machine is not None else sys.stdout
    json.dump(obj, stream, **dump_options)
    stream.write("\n")
    stream.flush()


def emit_line(text: str) -> None:
    """Write one line (e.g. a JSON line) to the real standard output."""
    stream = _machine if _machine is not None else sys.stdout
    stream.write(text + "\n")


def _fileno(stream: TextIO) -> int | None:
    """The stream's descriptor, or None for one without (a test's captured stdout)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
