"""Regression: mutant block-table-short (reference), 1 requests (schedcheck fuzz).

step 0: accounting.block-table-short: request r0 position 3: block table holds 0 blocks, tokens
up to 4 need 1

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_block_table_short
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_block_table_short"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=block-table-short."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "block-table-short")
