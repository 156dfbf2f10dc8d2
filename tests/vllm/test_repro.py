"""The standalone reproductions under repro/ (scripts for upstream issues: they import only
vLLM) run in every vLLM env whose release the script names in EXPECTED_EXIT (release ->
exit code; 1: the bug shows there) and exit with that code. A fixed vLLM makes the test
fail, so the README's analysis is revisited; a release a script does not name skips."""

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


def expected_exits(script: Path) -> dict[str, int]:
    """The script's module-level `EXPECTED_EXIT = {release: code}`."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "EXPECTED_EXIT"
        ]:
            return dict(ast.literal_eval(node.value))
    raise AssertionError(f"{script.name}: no EXPECTED_EXIT")


def test_every_repro_declares_its_exit_code():
    assert REPROS, "no reproductions under tests/vllm/repro"
    for script in REPROS:
        exits = expected_exits(script)
        assert exits and set(exits.values()) <= {0, 1}, script.name


@pytest.mark.vllm
@pytest.mark.skipif(_vllm_version() is None, reason="needs vllm (tox -e vllm-v1)")
@pytest.mark.parametrize("script", REPROS, ids=[s.stem for s in REPROS])
def test_the_reproduction_exits_as_declared(script: Path) -> None:
    release = _vllm_version()
    exits = expected_exits(script)
    if release not in exits:
        pytest.skip(f"{script.name} names {sorted(exits)}, not vLLM {release}")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == exits[release], done.stdout + done.stderr
