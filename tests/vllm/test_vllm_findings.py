"""The vLLM campaigns' findings, pinned by their shrunk bundles (README "Fuzz campaigns").

Each folder under bundles/ is named `<vLLM version>-<block manager>-<invariant>` and runs
only in that version's env (tox -e vllm-v0.6.0, ...): the replay must give back the
recorded violations and the recorded fingerprint. A finding that no longer reproduces
(a harness change, a different vLLM) fails here instead of silently leaving the README.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from schedcheck.sim.bisect import tox_env
from schedcheck.sim.fuzz.regression import assert_caught

BUNDLES = sorted((Path(__file__).resolve().parent / "bundles").iterdir())


def _vllm_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.vllm
@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_the_finding_reproduces(bundle: Path) -> None:
    version = bundle.name.split("-", 1)[0]
    if _vllm_version() != version:
        pytest.skip(f"needs vllm=={version} (tox -e {tox_env(version)})")
    assert_caught(bundle, None)
