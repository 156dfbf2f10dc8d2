"""Regression: mutant slot-mapping-from-zero (reference), 1 requests (schedcheck fuzz).

step 1: shadow-kv.read: request r0 position 0 slot 0 block 0: key 0 holds the KV of r0 position
1 (written at step 1), expected the KV of r0 position 0

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_slot_mapping_from_zero
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_slot_mapping_from_zero"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=slot-mapping-from-zero."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "slot-mapping-from-zero")
