"""Regression: mutant radix-leak-chunk-kv (reference), 2 requests (schedcheck fuzz).

step 3: block-pool.leak: block 1: block 1 has ref_cnt 0 but is neither free nor cached: it can
never be allocated again

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_radix_radix_leak_chunk_kv
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_radix_radix_leak_chunk_kv"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=radix-leak-chunk-kv."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "radix-leak-chunk-kv")
