"""`--json` writes only JSON to standard output, whatever the engine under test prints or
logs there (engine output goes to standard error): parsed with json.load, as a machine does."""

import json
import os
import subprocess
import sys
from pathlib import Path

TOYS = Path(__file__).resolve().parents[1] / "sim"
TRACE = Path(__file__).resolve().parents[2] / "traces/corpus/mooncake_conversation_first200.jsonl"
SMALL = ["--block-size", "4", "--num-gpu-blocks", "64", "--max-num-batched-tokens", "16"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(TOYS), "PYTHONHASHSEED": "0"}
    command = [sys.executable, "-m", "schedcheck.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    lines = [
        '{"request_id":"a","arrival_time_s":0.0,"prompt_token_ids":[1,2,3,4,5,6],"output_length":3}',
        '{"request_id":"b","arrival_time_s":0.001,"prompt_token_ids":[7,8,9],"output_length":2}',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replay_json_parses_while_the_engine_prints(tmp_path):
    proc = _cli("replay", str(_trace(tmp_path)), "--engine", "noisy_engine:make_engine",
                *SMALL, "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["exit_code"] == 0 and report["steps"] > 0
    for noise in ("INFO noisy: step 1", "noisy radix tree at step 1", "noisy C extension line"):
        assert noise in proc.stderr  # nothing lost: the engine's words on standard error


def test_fuzz_json_parses_while_the_engine_prints(tmp_path):
    argv = ["--seed", "0", "--no-db", "--max-examples", "8", "--budget-s", "60"]
    proc = _cli(
        "fuzz", "--engine", "noisy_engine:make_engine", *argv, "--out", str(tmp_path), "--json"
    )
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    assert report["examples"] >= 8
    assert "noisy C extension line" in proc.stderr


def test_without_json_the_engine_prints_where_it_prints(tmp_path):
    proc = _cli("replay", str(_trace(tmp_path)), "--engine", "noisy_engine:make_engine", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "noisy radix tree at step 1" in proc.stdout and "noisy C extension line" in proc.stdout


def test_a_factory_that_raises_is_one_setup_error_not_a_finding(tmp_path):
    """conformance and fuzz: exit 2 with one line naming the factory's exception and frame."""
    for argv in (
        ["conformance"],
        ["fuzz", "--no-db", "--max-examples", "4", "--out", str(tmp_path)],
    ):
        proc = _cli(*argv, "--engine", "broken_factory:make_engine")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith(
            "schedcheck: error: engine 'broken_factory:make_engine': its factory "
        )
        assert "ModuleNotFoundError: No module named 'nano_vllm_not_installed'" in line
        assert "broken_factory.py:make_engine:7" in line
        assert "FAIL" not in proc.stdout
