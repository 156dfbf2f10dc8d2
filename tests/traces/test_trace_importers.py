"""Importers on the shipped real traces (traces/corpus/real): exact counts and values; bad input."""

from __future__ import annotations

import csv
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from schedcheck.traces import TraceError, TraceRequest, detect_format, iter_trace
from schedcheck.traces.importers.azure import iter_azure
from schedcheck.traces.importers.burstgpt import iter_burstgpt
from schedcheck.traces.importers.mooncake import iter_mooncake

REAL = [
    ("mooncake/conversation_trace.jsonl.xz", "mooncake", 12_031, 3536.999),
    ("mooncake/synthetic_trace.jsonl.xz", "mooncake", 3_993, 1022.025),
    ("azure2023/AzureLLMInferenceTrace_code.csv.xz", "azure", 8_819, 3435.948056),
    ("azure2023/AzureLLMInferenceTrace_conv.csv.xz", "azure", 19_366, 3501.721937),
    ("burstgpt/BurstGPT_1_first400.csv.xz", "burstgpt", 400, 37269.0),
    ("burstgpt/BurstGPT_3_first400.csv.xz", "burstgpt", 400, 41453.0),
]


@pytest.mark.parametrize(("name", "fmt", "count", "last_s"), REAL)
def test_real_trace_counts_and_span(
    real_traces: Path, name: str, fmt: str, count: int, last_s: float
) -> None:
    path = real_traces / name
    assert detect_format(str(path)) == fmt
    requests = list(iter_trace(path, fmt))
    assert len(requests) == count
    assert requests[0].arrival_time_s == 0.0
    assert requests[-1].arrival_time_s == last_s
    assert [r.request_id for r in requests[:2]] == [f"{fmt}-0", f"{fmt}-1"]
    assert all(r.hash_block_size == 512 and r.output_length >= 1 for r in requests)
    assert list(iter_trace(path)) == requests  # auto-detected format gives the same


def test_mooncake_records_map_one_to_one(real_traces: Path) -> None:
    first, second = list(iter_mooncake(real_traces / "mooncake/conversation_trace.jsonl.xz"))[:2]
    assert first == TraceRequest(
        "mooncake-0", 0.0, 500, input_length=6758, hash_ids=tuple(range(14)), hash_block_size=512
    )
    assert second.hash_ids == (0, *range(14, 28)) and second.input_length == 7322


def test_azure_rows(real_traces: Path) -> None:
    requests = list(iter_azure(real_traces / "azure2023/AzureLLMInferenceTrace_code.csv.xz"))
    assert requests[1] == TraceRequest(
        "azure-1",
        0.052,
        8,
        input_length=3180,
        hash_ids=tuple(range(65536, 65543)),
        hash_block_size=512,
    )
    assert sum(r.input_length or 0 for r in requests) == 18_059_974
    all_ids = [h for r in requests for h in r.hash_ids or ()]
    assert len(set(all_ids)) == len(all_ids)  # no block shared: no prefix information


def test_burstgpt_1_rows(real_traces: Path) -> None:
    requests = list(iter_burstgpt(real_traces / "burstgpt/BurstGPT_1_first400.csv.xz"))
    assert sum(r.input_length or 0 for r in requests) == 208_206  # zero lengths became 1
    assert sum(r.output_length for r in requests) == 110_629
    assert sum(r.output_length == 1 for r in requests) == 17
    assert all(r.session_id is None and r.parent_request_id is None for r in requests)


def test_burstgpt_3_sessions_keep_every_full_prompt_length(real_traces: Path) -> None:
    path = real_traces / "burstgpt/BurstGPT_3_first400.csv.xz"
    requests = list(iter_burstgpt(path))
    with lzma.open(path, "rt", newline="") as fh:
        rows = list(csv.DictReader(fh))
    contexts: dict[str, int] = {}
    for request, row in zip(requests, rows, strict=True):
        history = contexts[request.parent_request_id] if request.parent_request_id else 0
        full_length = history + (request.input_length or 0)
        assert full_length == max(1, int(row["Request tokens"]))
        assert request.session_id == (row["Session ID"] or None)
        contexts[request.request_id] = full_length + request.output_length
    assert len({r.session_id for r in requests if r.session_id}) == 135
    assert sum(r.parent_request_id is not None for r in requests) == 186
    assert sum(r.session_id is None for r in requests) == 6


def test_burstgpt_3_one_session_turn_by_turn(real_traces: Path) -> None:
    requests = list(iter_burstgpt(real_traces / "burstgpt/BurstGPT_3_first400.csv.xz"))
    turns = [r for r in requests if r.session_id == "313b905a-2252-45ca-bf14-46e87f6233dd"]
    assert len(turns) == 24
    shape = [
        (
            r.input_length,
            None if r.parent_request_id is None else turns[i - 1].request_id == r.parent_request_id,
        )
        for i, r in enumerate(turns[:6])
    ]
    # 69 (+62) -> 249: parent, own 249-131; 400 > 249+98: own 53; 498 > 445: 53; 707 > 541: 166;
    # 763 <= 707+155: cut, a fresh root of 763
    assert shape == [(69, None), (118, True), (53, True), (53, True), (166, True), (763, None)]


BAD = [
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}\n',
        1,
        "hash_ids: has 1 ids, but input_length 600 in blocks of 512 needs 2",
    ),
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 6, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 0, "input_length": 6, "output_length": 1}\n',
        2,
        "hash_ids: missing (a Mooncake record has timestamp, input_length, output_length, "
        "hash_ids)",
    ),
    (
        "m.jsonl",
        '{"timestamp": 10, "input_length": 6, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 5, "input_length": 6, "output_length": 1, "hash_ids": [1]}\n',
        2,
        "timestamp: goes back in time: 5.0 < 10.0 on an earlier line "
        "(the source must be sorted by time)",
    ),
    (
        "m.jsonl",
        '{"timestamp": 10, "input_length": 6, "output_length": 1, "hash_ids": [1]}\n\n}\n',
        3,
        "json: not valid JSON: Expecting value (column 1)",
    ),
    (
        "m.jsonl",
        '{"timestamp": 0, "input_length": 6, "output_length": "many", "hash_ids": [1]}\n',
        1,
        'output_length: must be an integer, got "many"',
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,1,2\nyesterday,1,2\n",
        3,
        'TIMESTAMP: must be a date-time YYYY-MM-DD HH:MM:SS.fff, got "yesterday"',
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-30 00:00:00,1,2\n",
        2,
        'TIMESTAMP: not a valid date: day is out of range for month, got "2023-02-30 00:00:00"',
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,abc,2\n",
        2,
        'ContextTokens: must be an integer, got "abc"',
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,1,-5\n",
        2,
        "GeneratedTokens: must be an integer >= 0, got -5",
    ),
    (
        "a.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9,1\n",
        1,
        "GeneratedTokens: missing column (header: TIMESTAMP,ContextTokens)",
    ),
    (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,GPT-4\n",
        2,
        "record: has 2 columns, the header 6",
    ),
    (
        "b.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,GPT-4,1,2,3,API log\n4,GPT-4,1,2,3,API log\n",
        3,
        "Timestamp: goes back in time: 4.0 < 5.0 on an earlier line "
        "(the source must be sorted by time)",
    ),
]
FORMAT_OF = {"m.jsonl": "mooncake", "a.csv": "azure", "b.csv": "burstgpt"}


@pytest.mark.parametrize(("name", "text", "line", "expected"), BAD)
def test_bad_source_line(tmp_path: Path, name: str, text: str, line: int, expected: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError) as info:
        list(iter_trace(path, FORMAT_OF[name]))
    assert str(info.value) == f"{path}:{line}: {expected}"


def test_cli_import_of_a_bad_source_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    name, text, line, expected = BAD[5]
    source, out = tmp_path / name, tmp_path / "out.jsonl"
    source.write_text(text, encoding="utf-8")
    cli = [sys.executable, "-m", "schedcheck.cli", "trace", "import", str(source), "-o", str(out)]
    result = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert (result.returncode, result.stderr) == (2, f"{source}:{line}: {expected}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no output, no temp file


def test_undetectable_format(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"ts": 1}\n', encoding="utf-8")
    with pytest.raises(TraceError) as info:
        detect_format(str(path))
    assert str(info.value) == (
        f"{path}:1: format: cannot tell the format; pass --from schedcheck|mooncake|azure|burstgpt"
    )
