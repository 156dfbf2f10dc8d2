"""Regression: mutant chunk-before-prefix-hit (reference), 2 requests (schedcheck fuzz).

step 5: accounting.range: request r3 position 42: runs tokens up to 82, the request has 42
(num_computed_tokens 40 + num_scheduled_tokens 42)

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_chunk_before_prefix_hit
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_chunk_before_prefix_hit"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=chunk-before-prefix-hit."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "chunk-before-prefix-hit")
