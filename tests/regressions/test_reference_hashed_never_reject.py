"""Regression: mutant never-reject (reference), 1 requests (schedcheck fuzz).

liveness: *: the engine schedules nothing while requests wait; r0: preempted 1x; the waiting
queue is skipped in a step that preempted a request

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_never_reject
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_never_reject"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=never-reject."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "never-reject")
