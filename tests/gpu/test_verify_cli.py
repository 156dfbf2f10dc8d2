"""`schedcheck verify`: exit 0 / 1 / 2, JSON with every divergence, torch imported lazily."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schedcheck.cli.entry import main
from schedcheck.gpu import scenarios


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bundles")
    clean = scenarios.prefix_chunked(4)
    stale = scenarios.misaligned(4)[0]
    return {s.name: scenarios.write_scenario_bundle(s, root / s.name) for s in (clean, stale)}


def test_consistent_bundle_exits_0(bundles, capsys) -> None:
    assert main(["verify", str(bundles["prefix-chunked"]), "--backend", "torch-ref"]) == 0
    assert "consistent (torch-ref, cpu, fp32)" in capsys.readouterr().out


def test_misaligned_bundle_exits_1_with_json(bundles, capsys) -> None:
    code = main(["verify", str(bundles["stale-block"]), "--json", "--dtype", "fp64"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["verdict"] == "misaligned" and report["dtype"] == "fp64"
    first = report["first_divergence"]["B"]
    assert (first["cls"], first["kind"], first["step"], first["position"]) == (
        "misalignment",
        "kv-read",
        1,
        4,
    )
    assert (first["slot"], first["block"]) == (8, 2)
    assert report["num_divergences"] == len(report["divergences"]) + report["divergences_left_out"]
    assert all(d["cls"] in ("misalignment", "near-tie") for d in report["divergences"])


def test_bad_inputs_exit_2(bundles, tmp_path: Path, capsys, monkeypatch) -> None:
    assert main(["verify", str(tmp_path / "nope")]) == 2
    assert main(["verify", str(tmp_path)]) == 2  # a directory that is not a bundle
    assert "not a bundle" in capsys.readouterr().err
    assert main(["verify", str(bundles["prefix-chunked"]), "--backend", "flash-attn-4"]) == 2
    assert "backend 'flash-attn-4' refuses" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["verify", str(bundles["prefix-chunked"])]) == 2
    assert "verify needs torch" in capsys.readouterr().err


def test_importing_gpu_and_the_cli_does_not_import_torch() -> None:
    code = (
        "import sys, schedcheck.gpu, schedcheck.gpu.findings, schedcheck.gpu.scenarios, "
        "schedcheck.gpu.step_plan, schedcheck.cli.entry as c; c.build_parser(); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _write_trace(tmp_path: Path) -> Path:
    trace = tmp_path / "trace.jsonl"
    shared = list(range(100, 120))
    lines = [
        {"request_id": "a", "arrival_time_s": 0.0, "output_length": 3,
         "prompt_token_ids": [*shared, 7, 8, 9]},
        {"request_id": "b", "arrival_time_s": 0.0, "output_length": 4,
         "prompt_token_ids": [*shared, 5]},
        {"request_id": "c", "arrival_time_s": 0.01, "output_length": 2,
         "prompt_token_ids": list(range(300, 311))},
    ]  # fmt: skip
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return trace


def test_trace_input_runs_the_engine_loop_first(tmp_path: Path, capsys) -> None:
    trace = _write_trace(tmp_path)
    out = tmp_path / "bundle"
    code = main(["verify", str(trace), "--block-size", "4", "--max-num-batched-tokens", "8",
                 "--out", str(out), "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "consistent"
    assert (out / "schedule.jsonl").is_file() and report["steps"] > 3
    assert report["sampled"] == 3 + 4 + 2


def test_trace_input_with_drafts_clean_and_with_no_lookahead_slots(tmp_path: Path, capsys) -> None:
    """3 draft tokens: the clean engine replays consistent; without lookahead slots the first
    draft past a block table is a misalignment where the shadow KV put it."""
    trace = _write_trace(tmp_path)
    argv = ["verify", str(trace), "--block-size", "4", "--max-num-batched-tokens", "8",
            "--num-lookahead-tokens", "3", "--json"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "consistent"
    assert main([*argv, "--mutant", "no-lookahead-slots"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "misaligned"
    matched = report["violations_matched"]
    assert matched and all(m["same_position"] for m in matched)
    assert {m["found"]["kind"] for m in matched} == {"slot-invalid"}
