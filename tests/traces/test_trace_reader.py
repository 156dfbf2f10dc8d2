"""The trace reader: valid lines round-trip; every fault has an exact FILE:LINE: FIELD message,
and the CLI answers it with exit 2 and no traceback."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from schedcheck.traces import TraceError, TraceRequest, read_trace, request_to_line, write_trace

GOOD = '{"request_id": "a", "arrival_time_s": 1.0, "output_length": 4, "prompt_token_ids": [5, 6]}'


def line(**fields: object) -> str:
    """A line of GOOD with fields replaced (None: removed)."""
    obj = json.loads(GOOD)
    obj["request_id"] = "b"
    for name, value in fields.items():
        if value is None:
            obj.pop(name, None)
        else:
            obj[name] = value
    return json.dumps(obj)


HASH = {
    "prompt_token_ids": None,
    "input_length": 1025,
    "hash_ids": [0, 1, 2],
    "hash_block_size": 512,
}

# (second line, FIELD: message): the first line is GOOD, so every fault is on line 2.
FAULTS = [
    ("[1, 2]", "record: must be a JSON object, got [1, 2]"),
    (
        '{"request_id": "b",}',
        "json: not valid JSON: Expecting property name enclosed in double quotes (column 20)",
    ),
    (line(foo=1), "foo: unknown field (not in the trace schema)"),
    (line(request_id=None), "request_id: missing (a required field)"),
    (line(request_id=7), "request_id: must be a non-empty string, got 7"),
    (line(request_id=""), 'request_id: must be a non-empty string, got ""'),
    (line(arrival_time_s=None), "arrival_time_s: missing (a required field)"),
    (line(arrival_time_s="x"), 'arrival_time_s: must be a finite number of seconds, got "x"'),
    (line(arrival_time_s=True), "arrival_time_s: must be a finite number of seconds, got true"),
    (
        line(arrival_time_s=float("inf")),
        "arrival_time_s: must be a finite number of seconds, got Infinity",
    ),
    (
        line(arrival_time_s=0.5),
        "arrival_time_s: goes back in time: 0.5 < 1.0 on an earlier line "
        "(arrival times must be non-decreasing)",
    ),
    (line(output_length=None), "output_length: missing (a required field)"),
    (line(output_length=0), "output_length: must be >= 1, got 0"),
    (line(output_length=2.0), "output_length: must be an integer, got 2.0"),
    (line(output_length=True), "output_length: must be an integer, got true"),
    (
        line(prompt_token_ids=None),
        "prompt: missing: give prompt_token_ids or input_length + hash_ids + hash_block_size",
    ),
    (
        line(input_length=3, hash_ids=[1], hash_block_size=4),
        "prompt: give either prompt_token_ids or input_length + hash_ids + hash_block_size, "
        "not both",
    ),
    (line(prompt_token_ids=[]), "prompt_token_ids: must be a non-empty list of integers, got []"),
    (
        line(prompt_token_ids=[1, "2"]),
        'prompt_token_ids: item 1 must be an integer in [0, 2**31), got "2"',
    ),
    (
        line(prompt_token_ids=[2**31]),
        "prompt_token_ids: item 0 must be an integer in [0, 2**31), got 2147483648",
    ),
    (
        line(prompt_token_ids=[-1]),
        "prompt_token_ids: item 0 must be an integer in [0, 2**31), got -1",
    ),
    (
        line(**{**HASH, "hash_block_size": None}),
        "hash_block_size: missing (input_length, hash_ids, hash_block_size come together)",
    ),
    (line(**{**HASH, "input_length": 0}), "input_length: must be >= 1, got 0"),
    (line(**{**HASH, "hash_block_size": 0}), "hash_block_size: must be >= 1, got 0"),
    (
        line(**{**HASH, "hash_ids": [0, 1]}),
        "hash_ids: has 2 ids, but input_length 1025 in blocks of 512 needs 3",
    ),
    (
        line(**{**HASH, "hash_ids": [0, -3, 1]}),
        "hash_ids: item 1 must be an integer in [0, 2**44), got -3",
    ),
    (
        line(**{**HASH, "hash_ids": [0, 2**44, 1]}),
        "hash_ids: item 1 must be an integer in [0, 2**44), got 17592186044416",
    ),
    (line(abort_time_s=0.5), "abort_time_s: must be >= arrival_time_s (1.0), got 0.5"),
    (line(think_time_s=-0.5), "think_time_s: must be >= 0, got -0.5"),
    (line(priority="high"), 'priority: must be an integer, got "high"'),
    (line(session_id=3), "session_id: must be a non-empty string, got 3"),
    (line(request_id="a"), "request_id: duplicate: 'a' is used by an earlier line"),
    (line(parent_request_id="zz"), "parent_request_id: names no earlier request: 'zz'"),
    (line(parent_request_id="b"), "parent_request_id: names no earlier request: 'b'"),
]


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("bad", "expected"), FAULTS, ids=[f[1].split(":")[0] + str(i) for i, f in enumerate(FAULTS)]
)
def test_fault_message(tmp_path: Path, bad: str, expected: str) -> None:
    path = write_lines(tmp_path / "t.jsonl", GOOD, bad)
    with pytest.raises(TraceError) as info:
        list(read_trace(path))
    assert str(info.value) == f"{path}:2: {expected}"
    assert info.value.line == 2
    assert info.value.field == expected.split(":")[0]


@pytest.mark.parametrize(
    ("bad", "expected"), FAULTS, ids=[f[1].split(":")[0] + str(i) for i, f in enumerate(FAULTS)]
)
def test_cli_exits_2_with_the_message(tmp_path: Path, bad: str, expected: str) -> None:
    path = write_lines(tmp_path / "t.jsonl", GOOD, bad)
    result = run_cli("trace", "stats", str(path))
    assert result.returncode == 2
    assert result.stderr == f"{path}:2: {expected}\n"
    assert result.stdout == ""


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", *args], capture_output=True, text=True, check=False
    )


def test_non_utf8_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(TraceError, match=r"^.*t\.jsonl:2: record: not UTF-8: invalid start byte$"):
        list(read_trace(path))


def test_blank_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", "", GOOD, "   ", line(output_length=0))
    with pytest.raises(TraceError) as info:
        list(read_trace(path))
    assert str(info.value) == f"{path}:4: output_length: must be >= 1, got 0"


def test_valid_lines_parse_every_field(tmp_path: Path) -> None:
    full = {
        "request_id": "c",
        "arrival_time_s": 2,
        "output_length": 3,
        "input_length": 1025,
        "hash_ids": [0, 1, 2],
        "hash_block_size": 512,
        "abort_time_s": 2.5,
        "priority": -1,
        "session_id": "s",
        "parent_request_id": "a",
        "think_time_s": 0.25,
    }
    path = write_lines(tmp_path / "t.jsonl", GOOD, json.dumps(full), line(arrival_time_s=2.0))
    first, second, third = read_trace(path)
    assert first == TraceRequest("a", 1.0, 4, prompt_token_ids=(5, 6))
    assert second == TraceRequest(
        "c",
        2.0,
        3,
        input_length=1025,
        hash_ids=(0, 1, 2),
        hash_block_size=512,
        abort_time_s=2.5,
        priority=-1,
        session_id="s",
        parent_request_id="a",
        think_time_s=0.25,
    )
    assert type(second.arrival_time_s) is float
    assert third == TraceRequest("b", 2.0, 4, prompt_token_ids=(5, 6))


def test_null_optional_fields_mean_absent(tmp_path: Path) -> None:
    obj = {**json.loads(GOOD), "session_id": None, "abort_time_s": None, "priority": None}
    path = write_lines(tmp_path / "t.jsonl", json.dumps(obj))
    (request,) = read_trace(path)
    assert request == TraceRequest("a", 1.0, 4, prompt_token_ids=(5, 6))


def test_canonical_round_trip(tmp_path: Path) -> None:
    requests = [
        TraceRequest("a", 0.0, 2, prompt_token_ids=(9, 8, 7)),
        TraceRequest(
            "b",
            0.5,
            1,
            input_length=3,
            hash_ids=(4,),
            hash_block_size=16,
            priority=2,
            session_id="s",
            parent_request_id="a",
            think_time_s=1.5,
            abort_time_s=9.0,
        ),
    ]
    path = tmp_path / "t.jsonl"
    assert write_trace(path, requests) == 2
    assert list(read_trace(path)) == requests
    assert path.read_text().splitlines() == [
        '{"arrival_time_s":0.0,"output_length":2,"prompt_token_ids":[9,8,7],"request_id":"a"}',
        '{"abort_time_s":9.0,"arrival_time_s":0.5,"hash_block_size":16,"hash_ids":[4],'
        '"input_length":3,"output_length":1,"parent_request_id":"a","priority":2,'
        '"request_id":"b","session_id":"s","think_time_s":1.5}',
    ]
    assert request_to_line(requests[0]) == path.read_text().splitlines()[0]


def test_reader_streams(tmp_path: Path) -> None:
    """The first request comes out before a bad last line is read."""
    path = write_lines(
        tmp_path / "t.jsonl", GOOD, *[line(request_id=f"r{i}") for i in range(100)], "{"
    )
    requests = read_trace(path)
    assert next(requests).request_id == "a"
    with pytest.raises(TraceError, match=r":102: json: "):
        list(requests)


def test_reader_holds_one_line_at_a_time(tmp_path: Path) -> None:
    """100 lines of 5,000 tokens (~18 MB as Python tuples if held) stream in a few MB."""
    path = tmp_path / "big.jsonl"
    tokens = list(range(1000, 6000))
    with open(path, "w") as fh:
        for i in range(100):
            obj = {"request_id": f"r{i}", "arrival_time_s": i, "output_length": 1}
            fh.write(json.dumps({**obj, "prompt_token_ids": tokens}) + "\n")
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_trace(path))
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 100
    assert peak_bytes < 5_000_000


def test_trace_error_survives_pickle() -> None:
    error = TraceError("t.jsonl", 3, "output_length", "must be >= 1, got 0")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) == "t.jsonl:3: output_length: must be >= 1, got 0"
    assert (copy.path, copy.line, copy.field, copy.message) == (
        "t.jsonl",
        3,
        "output_length",
        "must be >= 1, got 0",
    )
