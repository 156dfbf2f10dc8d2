"""Regression: mutant no-lookahead-slots (reference), 1 requests (schedcheck fuzz).

step 3: shadow-kv.write-out-of-bounds: request r0 position 4: the drafter's
lookahead_slot_mapping (position 4) names slot -1, outside the KV cache (0..7) or outside the
block table

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_no_lookahead_slots
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_no_lookahead_slots"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=no-lookahead-slots."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "no-lookahead-slots")
