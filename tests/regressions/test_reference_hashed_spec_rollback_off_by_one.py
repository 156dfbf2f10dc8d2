"""Regression: mutant spec-rollback-off-by-one (reference), 2 requests (schedcheck fuzz).

step 3: accounting.manager-agreement: request r1 position 2: scheduler has num_computed_tokens
2, the KV manager 3

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_spec_rollback_off_by_one
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_spec_rollback_off_by_one"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=spec-rollback-off-by-one."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "spec-rollback-off-by-one")
