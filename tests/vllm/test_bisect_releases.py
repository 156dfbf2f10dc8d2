"""A real bisect across two installed vLLM releases (the v0 tox envs side by side).

Runs where both envs exist (`tox -e vllm-v0.5.4 --notest && tox -e vllm-v0.6.0 --notest`,
or SCHEDCHECK_BISECT_TOX_DIR naming a .tox that has them); skipped elsewhere.
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
ENVS = [TOX_DIR / env / "bin" / "python" for env in ("vllm-v0.5.4", "vllm-v0.6.0")]

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not all(p.exists() for p in ENVS), reason=f"needs both v0 envs under {TOX_DIR}"
    ),
]


def _bisect(bundle: str) -> dict:
    path = REPO / "tests/vllm/bundles" / bundle
    argv = ["bisect", str(path), "--releases", "0.5.4,0.6.0", "--tox-dir", str(TOX_DIR)]
    done = subprocess.run(
        [sys.executable, "-m", "schedcheck.sim", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_block_table_index_error_of_0_5_4_is_fixed_in_0_6_0():
    # vllm#7371: IndexError in BlockTable.append_token_ids on the last chunk of a prompt
    # that is a multiple of the block size; fixed by vllm#7380
    report = _bisect("0.5.4-bm2-engine-crash")
    assert [(r["release"], r["status"]) for r in report["releases"]] == [
        ("0.5.4", "engine-crash"),
        ("0.6.0", "clean"),
    ]
    assert report["verdict"]["kind"] == "fixed" and report["verdict"]["first_bad"] == "0.6.0"
