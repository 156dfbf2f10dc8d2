"""`schedcheck conformance` passes on the vLLM adapters, in their tox envs (tox -e vllm-v1,
vllm-v0.5.4, vllm-v0.6.0): every check the adapter's declaration allows passes."""

from __future__ import annotations

import importlib.metadata

import pytest

from schedcheck.sim.conformance.checks import CHECKS
from schedcheck.sim.conformance.kit import run_kit


def _vllm_version() -> str:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return ""


pytestmark = pytest.mark.vllm
V1 = _vllm_version().startswith("0.33.")
V0 = _vllm_version().startswith(("0.5.", "0.6."))


def _statuses(engine: str, block_manager: str | None = None) -> dict[str, tuple[str, list]]:
    return {r.name: (r.status, r.lines) for r in run_kit(engine, block_manager)}


@pytest.mark.skipif(not V1, reason="needs vllm 0.33 (tox -e vllm-v1)")
def test_vllm_v1_passes_the_kit():
    statuses = _statuses("vllm-v1")
    skipped = {
        "rejection": ("skip", ["the engine declares no rejection of a request that can never fit"])
    }
    assert statuses == {c.name: skipped.get(c.name, ("pass", [])) for c in CHECKS}


@pytest.mark.skipif(not V0, reason="needs vllm 0.5/0.6 (tox -e vllm-v0.5.4, vllm-v0.6.0)")
@pytest.mark.parametrize("block_manager", ["v1", "v2"])
def test_vllm_v0_passes_the_kit(block_manager):
    statuses = _statuses("vllm-v0", block_manager)
    skip = {
        "cache-salt": ("skip", ["the engine declares no cache_salt"]),
        "rejection": ("skip", ["the engine declares no rejection of a request that can never fit"]),
    }
    assert statuses == {c.name: skip.get(c.name, ("pass", [])) for c in CHECKS}
