"""`schedcheck replay` end to end (subprocesses): JSON, exit codes, bundles, determinism."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schedcheck.traces import TraceRequest, write_trace

HERE = Path(__file__).resolve().parents[1] / "sim"  # the toy engines
KEYS = {
    "requests",
    "finished",
    "steps",
    "sim_time_s",
    "wall_time_s",
    "violations",
    "fingerprint",
    "invariants_checked",
}


def _cli(*args, hashseed="0"):
    env = {**os.environ, "PYTHONPATH": str(HERE), "PYTHONHASHSEED": hashseed}
    return subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.jsonl"
    reqs = [
        TraceRequest(f"r{i}", i * 0.01, 4, prompt_token_ids=tuple(range(3, 30 + i)))
        for i in range(12)
    ]
    write_trace(path, reqs)
    return path


SMALL = ["--block-size", "4", "--num-gpu-blocks", "200", "--max-num-batched-tokens", "32"]


def test_clean_replay_json_and_exit_0(trace):
    proc = _cli("replay", str(trace), "--engine", "toy_engine:make_engine", *SMALL, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) >= KEYS
    assert (out["requests"], out["finished"], out["violations"]) == (12, 12, [])


def test_fingerprint_is_the_same_under_any_hash_seed(trace):
    a = _cli(
        "replay", str(trace), "--engine", "toy_engine:make_engine", *SMALL, "--json", hashseed="1"
    )
    b = _cli(
        "replay",
        str(trace),
        "--engine",
        "toy_engine:make_engine",
        *SMALL,
        "--json",
        hashseed="12345",
    )
    assert json.loads(a.stdout)["fingerprint"] == json.loads(b.stdout)["fingerprint"]


def test_violation_exits_1_and_its_bundle_reproduces(trace, tmp_path):
    out_dir = tmp_path / "bundle"
    proc = _cli(
        "replay",
        str(trace),
        "--engine",
        "toy_engine:make_swap_engine",
        *SMALL,
        "--out",
        str(out_dir),
        "--json",
    )
    assert proc.returncode == 1
    first = json.loads(proc.stdout)
    assert first["violations"][0]["invariant"] == "shadow-kv.read"
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        [
            "trace.jsonl",
            "config.json",
            "schedule.jsonl",
            "outputs.json",
            "violations.json",
            "summary.json",
            "command.txt",
            "kv_events.jsonl",  # a bundle with a violation: the engine's block events
        ]
    )
    again = _cli("replay", "--bundle", str(out_dir), "--json")
    assert again.returncode == 1
    rerun = json.loads(again.stdout)
    assert rerun["reproduced"] is True
    assert rerun["fingerprint"] == first["fingerprint"]


def test_bad_input_exits_2(trace, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"request_id": "a", "arrival_time_s": 0, "output_length": 0, "prompt_token_ids": [1]}\n'
    )
    proc = _cli("replay", str(bad), "--engine", "toy_engine:make_engine")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"{bad}:1: output_length:")
    assert "Traceback" not in proc.stderr
    proc = _cli("replay", str(trace), "--engine", "nosuch")
    assert (proc.returncode, "unknown engine" in proc.stderr) == (2, True)
    proc = _cli("replay", "--bundle", str(tmp_path))
    assert (proc.returncode, "not a bundle" in proc.stderr) == (2, True)


def test_reference_engine_fingerprint_is_the_same_under_any_hash_seed():
    runs = [
        json.loads(_cli("replay", "--max-requests", "20", "--json", hashseed=seed).stdout)
        for seed in ("0", "4242")
    ]
    assert runs[0]["violations"] == [] and runs[0]["finished"] == 20
    assert runs[0]["fingerprint"] == runs[1]["fingerprint"]
