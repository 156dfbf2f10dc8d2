"""`schedcheck verify`: exit 0 / 1 / 2, JSON with every divergence, torch imported lazily."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schedcheck.gpu import scenarios
from schedcheck.sim.cli import main


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
        "schedcheck.gpu.step_plan, schedcheck.sim.cli as c; c.build_parser(); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
