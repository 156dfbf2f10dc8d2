"""The global generators: seeded per example, restored per round (fuzz/global_rngs.py)."""

import random

import numpy as np
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from hypothesis.core import threadlocal
from hypothesis.internal import entropy

from schedcheck.fuzz.global_rngs import global_rngs_restored_per_round


def _first_draws(examples: int) -> list[tuple[float, float, float]]:
    """Each example's first draw from numpy's global generator, the `random` module and
    Hypothesis' own Random, in a seeded Hypothesis test."""
    seen: list[tuple[float, float, float]] = []

    @settings(max_examples=examples, database=None, derandomize=False)
    @seed(7)
    @given(st.integers(0, 10))
    def draw_globally(_n: int) -> None:
        own = threadlocal._hypothesis_global_random
        seen.append((np.random.random(), random.random(), own.random()))
        np.random.random(5)  # leave each generator elsewhere for the next example
        random.random(), own.random()

    draw_globally()
    return seen


def _states() -> tuple[np.ndarray, object, object]:
    own = threadlocal._hypothesis_global_random
    return np.random.get_state()[1].copy(), random.getstate(), own.getstate()


def _managed() -> list[object]:
    return [ref() for ref in entropy.RANDOMS_TO_MANAGE.data.values()]


def test_each_example_starts_from_seed_0_as_under_hypothesis_alone():
    alone = _first_draws(6)
    np.random.seed(0)
    seeded = (np.random.random(), random.Random(0).random(), random.Random(0).random())
    with global_rngs_restored_per_round():
        within = _first_draws(6)
    assert alone == within == [seeded] * 6


def test_each_state_after_the_round_is_the_state_before_it():
    np.random.seed(12345)
    random.seed(678)
    threadlocal._hypothesis_global_random.seed(9)
    before = _states()
    with global_rngs_restored_per_round():
        _first_draws(4)
        inside = _states()
        assert not np.array_equal(inside[0], before[0])
        assert inside[1] != before[1] and inside[2] != before[2]
    after = _states()
    assert np.array_equal(after[0], before[0]) and after[1:] == before[1:]


def test_hypothesis_manages_the_generators_again_after_the_round():
    _first_draws(1)  # Hypothesis' own Random exists from the first example on
    managed_before = _managed()
    with global_rngs_restored_per_round():
        inside = _managed()
        swapped = [r for r in inside if type(r).__name__ == "_SeededOnly"]
        assert len(swapped) == 3  # numpy's, the random module's, Hypothesis' own
        assert entropy.NP_RANDOM in swapped
    assert _managed() == managed_before
    assert isinstance(entropy.NP_RANDOM, entropy.NumpyRandomWrapper)


def test_the_states_are_restored_when_the_round_raises():
    np.random.seed(99)
    random.seed(98)
    before = _states()
    with pytest.raises(RuntimeError, match="a finding"), global_rngs_restored_per_round():
        np.random.seed(1)
        random.seed(2)
        raise RuntimeError("a finding")
    after = _states()
    assert np.array_equal(after[0], before[0]) and after[1] == before[1]
    assert isinstance(entropy.NP_RANDOM, entropy.NumpyRandomWrapper)
