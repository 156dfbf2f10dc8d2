"""Shared test setup: Hypothesis profiles and the path to the real traces the repository ships."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "nightly",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_TRACES = REPO_ROOT / "traces" / "corpus" / "real"


@pytest.fixture(scope="session")
def real_traces() -> Path:
    """The real public traces, xz-compressed, in the repository (traces/corpus/real)."""
    assert REAL_TRACES.is_dir(), f"the repository ships its real traces at {REAL_TRACES}"
    return REAL_TRACES
