"""Regression: mutant no-cache-hit-cap (reference), 2 requests (schedcheck fuzz).

liveness: *: the engine schedules nothing while requests wait; r1: nothing to compute this step
(prefix hit 4 of 4 tokens, 1 tokens of budget left)

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_no_cache_hit_cap
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_no_cache_hit_cap"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=no-cache-hit-cap."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "no-cache-hit-cap")
