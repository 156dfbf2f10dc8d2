"""Regression: mutant stale-cache-hit (reference), 2 requests (schedcheck fuzz).

step 6: shadow-kv.read: request r1 position 0 slot 1 block 1: key 0 holds the KV of r0 position
5 (written at step 5), expected the KV of r1 position 0

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_stale_cache_hit
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_stale_cache_hit"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=stale-cache-hit."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "stale-cache-hit")
