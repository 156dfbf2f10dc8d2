"""Shared test setup: Hypothesis profiles and the path to the real traces beside the checkout."""

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
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The real traces in ../shared/traces (CI has that folder beside the checkout)."""
    if not SHARED_TRACES.is_dir():
        pytest.fail(f"real traces not found at {SHARED_TRACES}")
    return SHARED_TRACES
