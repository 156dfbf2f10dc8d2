"""Regression: mutant resume-drops-last-token (reference), 2 requests (schedcheck fuzz).

step 77: accounting.num-tokens: request r1 position 76: scheduled with num_tokens 76, the
request has 77 tokens

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_resume_drops_last_token
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_resume_drops_last_token"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=resume-drops-last-token."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "resume-drops-last-token")
