"""`schedcheck trace import|gen|stats|head`, run as a user runs it: `python -m schedcheck.sim`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = [
    '{"request_id":"a","arrival_time_s":0,"output_length":3,"prompt_token_ids":[5,6,7,8]}',
    '{"request_id":"b","arrival_time_s":1.5,"output_length":2,"prompt_token_ids":[5,6,7,8,9],'
    '"session_id":"s","think_time_s":0.5}',
    '{"request_id":"c","arrival_time_s":2,"output_length":1,"input_length":600,"hash_ids":[1,2],'
    '"hash_block_size":512,"parent_request_id":"b","abort_time_s":9}',
]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "schedcheck.cli", "trace", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(SMALL) + "\n", encoding="utf-8")
    return path


def test_stats_json_on_mooncake_directly(real_traces: Path) -> None:
    path = real_traces / "mooncake/conversation_trace.jsonl.xz"
    result = run("stats", str(path), "--from", "mooncake", "--json")
    assert (result.returncode, result.stderr) == (0, "")
    stats = json.loads(result.stdout)
    assert stats["requests"] == 12_031
    assert abs(stats["prefix_hit_ratio"] - 0.374) <= 0.01 * 0.374
    assert stats["prefix_hit_tokens"] == 54_098_411


def test_import_then_stats_gives_the_same_numbers(real_traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "conv.jsonl"
    source = real_traces / "mooncake/conversation_trace.jsonl.xz"
    result = run("import", str(source), "--from", "mooncake", "-o", str(out))
    assert (result.returncode, result.stderr) == (0, f"wrote 12031 requests to {out}\n")
    direct = json.loads(run("stats", str(source), "--json").stdout)
    imported = json.loads(run("stats", str(out), "--json").stdout)
    assert {**direct, "trace": ""} == {**imported, "trace": ""}


def test_import_with_window(real_traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "code.jsonl"
    source = real_traces / "azure2023/AzureLLMInferenceTrace_code.csv.xz"
    args = ("--start-s", "300", "--duration-s", "60", "--time-scale", "2", "-o", str(out))
    assert run("import", str(source), *args).returncode == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 130
    assert json.loads(lines[0])["request_id"] == "azure-781"


def test_stats_text(small: Path) -> None:
    result = run("stats", str(small), "--block-size", "4")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"trace          {small}",
        "requests       3",
        "time span      2.000 s",
        "arrival rate   1.50 req/s",
        "input length   p50 5  p90 487  p99 595  max 607  mean 205.3",
        "output length  p50 2  p90 3  p99 3  max 3  mean 2.0",
        "prefix hits    1.79% of 616 prompt tokens (unbounded cache; token prompts in blocks of 4)",
        "sessions       1 (1 later turns), aborts 1",
    ]


def test_head_table_and_json(small: Path) -> None:
    table = run("head", str(small), "-n", "3")
    assert table.stdout.splitlines() == [
        "request_id              arrival_s   prompt  output  session/parent",
        "a                           0.000     4tok       3",
        "b                           1.500     5tok       2  session=s think_s=0.5",
        "c                           2.000  600h512       1  parent=b abort_s=9.0",
    ]
    lines = run("head", str(small), "-n", "2", "--json").stdout.splitlines()
    assert lines == [
        '{"arrival_time_s":0.0,"output_length":3,"prompt_token_ids":[5,6,7,8],"request_id":"a"}',
        '{"arrival_time_s":1.5,"output_length":2,"prompt_token_ids":[5,6,7,8,9],'
        '"request_id":"b","session_id":"s","think_time_s":0.5}',
    ]


def test_head_of_the_corpus_matches_its_lines() -> None:
    corpus = (
        Path(__file__).resolve().parents[2] / "traces/corpus/mooncake_conversation_first200.jsonl"
    )
    result = run("head", str(corpus), "-n", "3", "--json")
    assert result.stdout.splitlines() == corpus.read_text().splitlines()[:3]


GEN = ("--num-requests", "30", "--input-len", "10:40", "--output-len", "4", "-o", "-")


@pytest.mark.parametrize("kind", ["poisson", "gamma", "closed-loop", "shared-prefix", "multi-turn"])
def test_gen_is_deterministic_for_a_seed(kind: str) -> None:
    first = run("gen", kind, "--seed", "5", *GEN)
    assert first.returncode == 0 and first.stdout
    assert run("gen", kind, "--seed", "5", *GEN).stdout == first.stdout
    assert run("gen", kind, "--seed", "6", *GEN).stdout != first.stdout


def test_gen_writes_a_file_the_reader_accepts(tmp_path: Path) -> None:
    out = tmp_path / "g.jsonl"
    args = ("--num-groups", "2", "--group-size", "3", "--prefix-len", "32", "--input-len", "15:17")
    result = run("gen", "shared-prefix", *args, "--lengths", "boundary", "-o", str(out))
    assert (result.returncode, result.stderr) == (0, f"wrote 6 requests to {out}\n")
    stats = json.loads(run("stats", str(out), "--json").stdout)
    assert stats["requests"] == 6 and stats["prefix_hit_tokens"] == 2 * 2 * 32
    lengths = [
        len(json.loads(line)["prompt_token_ids"]) - 32 for line in out.read_text().splitlines()
    ]
    assert set(lengths) <= {15, 16, 17}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("gen", "poisson", "--burstiness", "2", "-o", "-"),
            "schedcheck: error: poisson has burstiness 1; use KIND gamma for --burstiness",
        ),
        (
            ("gen", "gamma", "--input-len", "18:30", "--lengths", "boundary", "-o", "-"),
            "schedcheck: error: --input-len 18:30: no k*16+-1 length in [18, 30]",
        ),
        (
            ("gen", "gamma", "--output-len", "0", "-o", "-"),
            "schedcheck: error: --output-len must be N or LO:HI with 1 <= LO <= HI, got '0'",
        ),
        (
            ("gen", "gamma", "--think-time-s", "x", "-o", "-"),
            "schedcheck: error: --think-time-s must be N or LO:HI, got 'x'",
        ),
        (("stats", "/nonexistent/t.jsonl"), "/nonexistent/t.jsonl: No such file or directory"),
        (("stats",), None),
        (("stats", "x.jsonl", "--time-scale", "0"), None),
        (("stats", "x.jsonl", "--from", "parquet"), None),
    ],
)
def test_usage_errors_exit_2_without_traceback(args: tuple[str, ...], message: str | None) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    if message is not None:
        assert result.stderr == message + "\n"
    else:
        assert "usage: schedcheck trace" in result.stderr


@pytest.mark.parametrize("action", ["import", "gen", "stats", "head"])
def test_help(action: str) -> None:
    result = run(action, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: schedcheck trace {action}")
    assert "--" in result.stdout
