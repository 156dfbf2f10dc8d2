"""numpy's global generator: seeded per example, restored per round (fuzz/global_rngs.py)."""

import numpy as np
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from hypothesis.internal import entropy

from schedcheck.fuzz.global_rngs import numpy_restored_per_round


def _first_draws(examples: int) -> list[float]:
    """The first np.random.random() of each example of a seeded Hypothesis test."""
    seen: list[float] = []

    @settings(max_examples=examples, database=None, derandomize=False)
    @seed(7)
    @given(st.integers(0, 10))
    def draw_globally(_n: int) -> None:
        seen.append(np.random.random())
        np.random.random(5)  # leave the generator somewhere else for the next example

    draw_globally()
    return seen


def test_each_example_starts_from_seed_0_as_under_hypothesis_alone():
    np.random.seed(0)
    seeded = np.random.random()
    alone = _first_draws(6)
    with numpy_restored_per_round():
        within = _first_draws(6)
    assert alone == within == [seeded] * 6


def test_the_state_after_the_round_is_the_state_before_it():
    np.random.seed(12345)
    np.random.random(3)
    before = np.random.get_state()
    with numpy_restored_per_round():
        _first_draws(4)
        assert not np.array_equal(np.random.get_state()[1], before[1])
    after = np.random.get_state()
    assert np.array_equal(after[1], before[1]) and after[2] == before[2]


def test_hypothesis_manages_numpy_again_after_the_round():
    with numpy_restored_per_round():
        inside = entropy.NP_RANDOM
        assert type(inside).__name__ == "_SeededOnly"  # swapped on the Hypothesis installed
        assert inside in [ref() for ref in entropy.RANDOMS_TO_MANAGE.data.values()]
    managed = [ref() for ref in entropy.RANDOMS_TO_MANAGE.data.values()]
    assert isinstance(entropy.NP_RANDOM, entropy.NumpyRandomWrapper)
    assert entropy.NP_RANDOM in managed and inside not in managed


def test_the_state_is_restored_when_the_round_raises():
    np.random.seed(99)
    before = np.random.get_state()[1].copy()
    try:
        with numpy_restored_per_round():
            np.random.seed(1)
            raise RuntimeError("a finding")
    except RuntimeError:
        pass
    assert np.array_equal(np.random.get_state()[1], before)
    assert isinstance(entropy.NP_RANDOM, entropy.NumpyRandomWrapper)
