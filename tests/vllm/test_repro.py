"""The standalone reproductions under repro/ (scripts for upstream issues: they import only
vLLM) run in the vllm-v1 env and exit with the code each declares in EXPECTED_EXIT
(1: the bug shows in vLLM 0.33.0). A fixed vLLM makes the test fail, so the README's
analysis is revisited."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

REPROS = sorted((Path(__file__).resolve().parent / "repro").glob("*.py"))


def _vllm_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def expected_exit(script: Path) -> int:
    """The script's module-level `EXPECTED_EXIT = N`."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "EXPECTED_EXIT"
        ]:
            return int(ast.literal_eval(node.value))
    raise AssertionError(f"{script.name}: no EXPECTED_EXIT")


def test_every_repro_declares_its_exit_code():
    assert REPROS, "no reproductions under tests/vllm/repro"
    assert {expected_exit(s) for s in REPROS} <= {0, 1}


@pytest.mark.vllm
@pytest.mark.skipif(_vllm_version() != "0.33.0", reason="needs vllm==0.33.0 (tox -e vllm-v1)")
@pytest.mark.parametrize("script", REPROS, ids=[s.stem for s in REPROS])
def test_the_reproduction_exits_as_declared(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == expected_exit(script), done.stdout + done.stderr
