"""Regression: mutant radix-prefix-not-advanced (reference), 1 requests (schedcheck fuzz).

step 0: accounting.manager-agreement: request r0 position 0: scheduler has num_computed_tokens
1, the KV manager 0

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_radix_radix_prefix_not_advanced
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_radix_radix_prefix_not_advanced"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=radix-prefix-not-advanced."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "radix-prefix-not-advanced")
