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


SKIPPED_V0 = {
    "cache-salt": ("skip", ["the engine declares no cache_salt"]),
    "rejection": ("skip", ["the engine declares no rejection of a request that can never fit"]),
}


@pytest.mark.skipif(not V0, reason="needs vllm 0.5/0.6 (tox -e vllm-v0.5.4, vllm-v0.6.0)")
def test_vllm_v0_block_manager_v1_passes_the_kit():
    statuses = _statuses("vllm-v0", "v1")
    assert statuses == {c.name: SKIPPED_V0.get(c.name, ("pass", [])) for c in CHECKS}


@pytest.mark.skipif(_vllm_version() != "0.6.0", reason="needs vllm 0.6.0 (tox -e vllm-v0.6.0)")
def test_vllm_v0_6_block_manager_v2_fails_where_its_known_bug_shows():
    """vllm#7822 (README "Fuzz campaigns"): block manager v2 marks every block allocated at
    admission computed after the first chunk, so each check that prefills over several
    chunks sees a cached block with unwritten slots."""
    failed = {
        n: lines for n, (status, lines) in _statuses("vllm-v0", "v2").items() if status == "fail"
    }
    assert sorted(failed) == [
        "abort-mid-chunk",
        "chunked-prefill",
        "later-turn",
        "preemption",
        "prefix-hit",
    ]
    assert {lines[0].split(": ")[1] for lines in failed.values()} == {"block-pool.cached-unwritten"}


@pytest.mark.skipif(_vllm_version() != "0.5.4", reason="needs vllm 0.5.4 (tox -e vllm-v0.5.4)")
def test_vllm_v0_5_block_manager_v2_crashes_where_its_known_bug_shows():
    """vllm#7371 (README "Fuzz campaigns"): the last chunk of a prompt whose length is a
    multiple of the block size indexes past the block table; abort-mid-chunk's prompt is 32
    tokens, prefilled 8 a step."""
    failed = {
        n: lines for n, (status, lines) in _statuses("vllm-v0", "v2").items() if status == "fail"
    }
    assert failed == {
        "abort-mid-chunk": ["step 1: engine-crash:: schedule: IndexError: list index out of range"]
    }
