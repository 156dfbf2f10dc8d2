"""Regression: mutant whole-prompt-computed (reference), 1 requests (schedcheck fuzz).

step 0: block-pool.cached-unwritten: request r0 position 0 block 0: block 0 is in the prefix
cache but not all of its slots were written

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_whole_prompt_computed
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_whole_prompt_computed"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=whole-prompt-computed."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "whole-prompt-computed")
