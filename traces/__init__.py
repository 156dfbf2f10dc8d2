"""Traces: the schema, the streaming reader and writer, importers of public formats,
generators, statistics and the bundle format. See README "Trace format"."""

from schedcheck.traces.errors import TraceError
from schedcheck.traces.load import FORMATS, detect_format, iter_trace
from schedcheck.traces.reader import read_trace
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.writer import request_to_json, request_to_line, write_trace

__all__ = [
    "FORMATS",
    "TraceError",
    "TraceRequest",
    "detect_format",
    "iter_trace",
    "read_trace",
    "request_to_json",
    "request_to_line",
    "write_trace",
]
