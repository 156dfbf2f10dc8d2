"""engines/arrays.py: the first True of a mask, exact values."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from schedcheck.engines.arrays import first_true


def test_first_true_exact_values():
    assert first_true(np.array([False, True, True]), -1) == 1
    assert first_true(np.array([True, False]), -1) == 0
    assert first_true(np.array([False, False]), 7) == 7  # argmax of all False is 0
    assert first_true(np.zeros(0, bool), 3) == 3


@given(st.lists(st.booleans(), max_size=40))
def test_first_true_is_flatnonzero_first(flags):
    mask = np.array(flags, dtype=bool)
    hits = np.flatnonzero(mask)
    assert first_true(mask, -1) == (int(hits[0]) if hits.size else -1)
