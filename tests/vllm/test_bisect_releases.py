"""Real bisects across two installed vLLM releases: the v0 tox envs side by side, and the
v1 envs of 0.11.0 and 0.11.1.

Each runs where both its envs exist (`tox -e vllm-v0.5.4 --notest && tox -e vllm-v0.6.0
--notest`, `tox -e vllm-v1-0.11.0 --notest && tox -e vllm-v1-0.11.1 --notest`, or
SCHEDCHECK_BISECT_TOX_DIR naming a .tox that has them); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOX_DIR = Path(os.environ.get("SCHEDCHECK_BISECT_TOX_DIR", REPO / ".tox"))
V0_ENVS = ("vllm-v0.5.4", "vllm-v0.6.0")
V1_ENVS = ("vllm-v1-0.11.0", "vllm-v1-0.11.1")

pytestmark = pytest.mark.vllm


def _needs(envs: tuple[str, ...]) -> pytest.MarkDecorator:
    missing = [e for e in envs if not (TOX_DIR / e / "bin" / "python").exists()]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} under {TOX_DIR}")


def _bisect(bundle: str, releases: str = "0.5.4,0.6.0") -> dict:
    path = REPO / "tests/vllm/bundles" / bundle
    argv = ["bisect", str(path), "--releases", releases, "--tox-dir", str(TOX_DIR)]
    done = subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@_needs(V0_ENVS)
def test_the_block_table_index_error_of_0_5_4_is_fixed_in_0_6_0():
    # vllm#7371: IndexError in BlockTable.append_token_ids on the last chunk of a prompt
    # that is a multiple of the block size; fixed by vllm#7380
    report = _bisect("0.5.4-bm2-engine-crash")
    assert [(r["release"], r["status"]) for r in report["releases"]] == [
        ("0.5.4", "engine-crash"),
        ("0.6.0", "clean"),
    ]
    assert report["verdict"]["kind"] == "fixed" and report["verdict"]["first_bad"] == "0.6.0"


@_needs(V1_ENVS)
def test_the_same_step_preemption_of_0_11_0_is_fixed_in_0_11_1():
    # the priority policy preempts a request it scheduled earlier in the same schedule()
    # call and leaves it in num_scheduled_tokens (docs/bisect.md); 0.11.1 takes it back
    report = _bisect("0.11.0-v1-priority-engine-crash", "0.11.0,0.11.1")
    assert [(r["release"], r["status"]) for r in report["releases"]] == [
        ("0.11.0", "engine-crash"),
        ("0.11.1", "clean"),
    ]
    assert report["verdict"]["kind"] == "fixed" and report["verdict"]["first_bad"] == "0.11.1"
