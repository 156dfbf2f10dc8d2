"""Regression: mutant hash-no-parent (reference), 2 requests (schedcheck fuzz).

step 1: shadow-kv.read: request r2 position 4 slot 0 block 0: key 4 holds the KV of r0 position
0 (written at step 0), expected the KV of r2 position 4

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_hash_no_parent
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_hash_no_parent"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=hash-no-parent."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "hash-no-parent")
