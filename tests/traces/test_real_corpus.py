"""The real traces ship in the repository, xz-compressed, and every reader opens them as is.

A fresh clone has nothing beside it: tests and benchmarks read `traces/corpus/real/*.xz`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from schedcheck.traces import iter_trace
from schedcheck.traces.errors import TraceError
from schedcheck.traces.files import content_name
from schedcheck.traces.load import detect_format

REPO_ROOT = Path(__file__).resolve().parents[2]
SLICE = REPO_ROOT / "traces/corpus/mooncake_conversation_first200.jsonl"


def _manifest(real_traces: Path) -> list[tuple[str, str]]:
    lines = (real_traces / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
    return [(line[:64], line[66:]) for line in lines]


def test_every_shipped_trace_is_the_source_file_byte_for_byte(real_traces: Path) -> None:
    manifest = _manifest(real_traces)
    assert [name for _, name in manifest] == [
        "mooncake/conversation_trace.jsonl",
        "mooncake/synthetic_trace.jsonl",
        "azure2023/AzureLLMInferenceTrace_code.csv",
        "azure2023/AzureLLMInferenceTrace_conv.csv",
        "burstgpt/BurstGPT_1_first400.csv",
        "burstgpt/BurstGPT_3_first400.csv",
    ]
    for digest, name in manifest:
        content = lzma.decompress((real_traces / f"{name}.xz").read_bytes())
        assert hashlib.sha256(content).hexdigest() == digest, name


def test_no_test_or_benchmark_names_the_shared_folder() -> None:
    offenders = []
    for folder in ("tests", "bench"):
        for path in sorted((REPO_ROOT / folder).rglob("*")):
            if path.suffix not in {".py", ".txt", ".json", ".md", ".sh", ".ini", ".toml"}:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            # spelled in two pieces so that this file does not name it either
            if "../" + "shared" in text or "shared" + "/traces" in text:
                offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == []


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("mooncake/conversation_trace.jsonl.xz", "mooncake"),
        ("azure2023/AzureLLMInferenceTrace_code.csv.xz", "azure"),
        ("burstgpt/BurstGPT_1_first400.csv.xz", "burstgpt"),
    ],
)
def test_the_format_is_told_through_the_compression(real_traces: Path, name: str, fmt: str) -> None:
    assert detect_format(str(real_traces / name)) == fmt


def test_content_name_drops_only_a_compression_suffix() -> None:
    assert content_name("a/b.csv.xz") == "a/b.csv"
    assert content_name("a/b.jsonl.GZ") == "a/b.jsonl"
    assert content_name("a/b.csv") == "a/b.csv"
    assert content_name("a/b.tar") == "a/b.tar"


def test_plain_xz_and_gz_give_the_same_requests(tmp_path: Path) -> None:
    raw = SLICE.read_bytes()
    (tmp_path / "t.jsonl.xz").write_bytes(lzma.compress(raw))
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(raw, mtime=0))
    plain = list(iter_trace(SLICE))
    assert len(plain) == 200
    assert list(iter_trace(tmp_path / "t.jsonl.xz")) == plain
    assert list(iter_trace(tmp_path / "t.jsonl.gz")) == plain


def test_a_cut_xz_file_is_a_trace_error_at_the_line_reached(tmp_path: Path) -> None:
    packed = lzma.compress(SLICE.read_bytes())
    cut = tmp_path / "cut.jsonl.xz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(TraceError) as caught:
        list(iter_trace(cut))
    assert caught.value.field == "compression"
    assert caught.value.path == str(cut)
    assert 1 < caught.value.line <= 200
    assert "corrupt .xz data" in caught.value.message


def test_trace_stats_on_a_corrupt_xz_file_is_exit_2_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl.xz"
    bad.write_bytes(b"not xz at all\n")
    done = subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", "trace", "stats", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"{bad}:1: compression: corrupt .xz data")
    assert "Traceback" not in done.stderr


def test_replay_reads_an_xz_trace_as_its_plain_copy(tmp_path: Path) -> None:
    first20 = b"".join(SLICE.read_bytes().splitlines(keepends=True)[:20])
    (tmp_path / "t.jsonl").write_bytes(first20)
    (tmp_path / "t.jsonl.xz").write_bytes(lzma.compress(first20))
    fingerprints = []
    for name in ("t.jsonl", "t.jsonl.xz"):
        done = subprocess.run(
            [sys.executable, "-m", "schedcheck.cli", "replay", str(tmp_path / name), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        fingerprints.append(json.loads(done.stdout)["fingerprint"])
    assert len(fingerprints[0]) == 64
    assert fingerprints[0] == fingerprints[1]
