"""Regression: mutant cache-rejected-draft-block (reference), 4 requests (schedcheck fuzz).

step 15: block-pool.hash-content: request r7 position 0 block 0: block 0's hash 6f47864cb33faed4
named other content before: equal hash, different tokens or parents

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_cache_rejected_draft_block
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_cache_rejected_draft_block"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=cache-rejected-draft-block."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "cache-rejected-draft-block")
