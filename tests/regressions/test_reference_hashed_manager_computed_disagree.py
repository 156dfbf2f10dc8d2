"""Regression: mutant manager-computed-disagree (reference), 2 requests (schedcheck fuzz).

step 1: accounting.manager-agreement: request r9 position 2: scheduler has num_computed_tokens
2, the KV manager 4

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_manager_computed_disagree
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_manager_computed_disagree"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=manager-computed-disagree."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "manager-computed-disagree")
