"""Regression: mutant block-table-hits-only (reference), 3 requests (schedcheck fuzz).

step 1: shadow-kv.read: request r3 position 0 slot 0 block 0: key 0 holds the KV of r0 position
0 (written at step 0), expected the KV of r3 position 0

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_block_table_hits_only
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_block_table_hits_only"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=block-table-hits-only."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "block-table-hits-only")
