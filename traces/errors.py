"""The one error every trace reader, importer and window raises for bad input."""

from __future__ import annotations


class TraceError(ValueError):
    """A bad line of a trace file; `str()` is exactly `FILE:LINE: FIELD: what is wrong`.

    `line` is 1-based (the header of a CSV file is line 1). `field` names the JSON key or CSV
    column that is wrong, or a pseudo-field for the line as a whole: `json` (not valid JSON),
    `record` (not an object / wrong number of columns), `prompt` (prompt forms), `format`.
    """

    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        assert line >= 1, "lines are 1-based"
        assert field, "a trace error names a field"
        assert message, "a trace error says what is wrong"
        super().__init__(path, line, field, message)  # args rebuild it (SimPy, pickle)
        self.path = path
        self.line = line
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.field}: {self.message}"


class LineContext:
    """Where a record came from: builds TraceErrors for one line of one file."""

    __slots__ = ("line", "path")

    def __init__(self, path: str, line: int) -> None:
        self.path = path
        self.line = line

    def error(self, field: str, message: str) -> TraceError:
        """The TraceError for `field` of this line (returned, for the caller to raise)."""
        return TraceError(self.path, self.line, field, message)
