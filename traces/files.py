"""Reading a trace file's raw lines, plain or compressed (`.xz`, `.gz`), transparently.

Every reader and importer reads through `binary_lines`, so each command that takes a trace
(`trace stats`, `trace import`, `replay`, `diff`, `--from` with any format) takes
`conversation_trace.jsonl.xz` as it takes `conversation_trace.jsonl`. The format is told
from `content_name` (the name without its compression suffix: `x.csv.xz` is a CSV file).

A compressed file that is corrupt or cut short is bad input like a bad line: a TraceError
naming the file, the line reached and the field `compression`.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import zlib
from collections.abc import Callable, Iterator

from schedcheck.traces.errors import TraceError

_OPENERS: dict[str, Callable[[str], io.BufferedIOBase]] = {
    ".xz": lambda name: lzma.open(name, "rb"),  # noqa: SIM115 (the caller closes it: with)
    ".gz": lambda name: gzip.open(name, "rb"),  # noqa: SIM115
}
_CORRUPT = (lzma.LZMAError, gzip.BadGzipFile, zlib.error, EOFError)


def compression_suffix(path: str | os.PathLike[str]) -> str | None:
    """`.xz` or `.gz` if the file is read decompressed, else None (by name, lower case)."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    return suffix if suffix in _OPENERS else None


def content_name(path: str | os.PathLike[str]) -> str:
    """The file's name without its compression suffix: `a/b.csv.xz` -> `a/b.csv`."""
    name = os.fspath(path)
    suffix = compression_suffix(name)
    return name[: -len(suffix)] if suffix else name


def binary_lines(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """The raw lines of the file (newline kept), decompressed on the fly if compressed."""
    name = os.fspath(path)
    suffix = compression_suffix(name)
    if suffix is None:
        with open(name, "rb") as fh:
            yield from fh
        return
    lines_read = 0
    with _OPENERS[suffix](name) as fh:
        try:
            for raw in fh:
                yield raw
                lines_read += 1
        except _CORRUPT as exc:
            raise TraceError(
                name, lines_read + 1, "compression", f"corrupt {suffix} data: {exc}"
            ) from None
