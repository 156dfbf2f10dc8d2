"""Regression: mutant seq-len-full-prompt (reference), 1 requests (schedcheck fuzz).

step 0: shadow-kv.causal-alignment: request r0 position 0: the row of position 0 attends keys
0..3 (seq_len 4, query_len 1), it must attend keys 0..0

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/reference_hashed_seq_len_full_prompt
"""

from pathlib import Path

from schedcheck.fuzz.regression import assert_caught, assert_clean

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "reference_hashed_seq_len_full_prompt"


def test_no_violation():
    """Passes on the clean engine; fails with SCHEDCHECK_MUTANT=seq-len-full-prompt."""
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "seq-len-full-prompt")
