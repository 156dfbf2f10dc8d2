"""Regression: mutant radix-abort-frees-tree-pages (reference), 4 requests (schedcheck fuzz).

step 11: block-pool.free-queue: request r4 position 0 block 0: block 0 is in the free queue with
ref_cnt 1: a referenced block could be evicted

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_radix_radix_abort_frees_tree_pages
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_radix_radix_abort_frees_tree_pages"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=radix-abort-frees-tree-pages."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "radix-abort-frees-tree-pages")
