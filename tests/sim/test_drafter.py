"""The drafter (sim/drafter.py): its draws from the run's generator, one by one or at once."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcheck.invariants import hash_model
from schedcheck.sim.drafter import SCALAR_DRAWS_MAX, Drafter
from schedcheck.traces.tokens import FIRST_TOKEN_ID

VOCAB_SIZE = 32_000


def _drafts_drawn_at_once(rng, k, acceptance, identity, n):
    """The drafts as the drafter drew them before its scalar path: `integers(size=k)`."""
    right = rng.random(k) < acceptance
    offsets = rng.integers(1, VOCAB_SIZE - FIRST_TOKEN_ID, size=k)
    return tuple(hash_model.sample_chain(identity, n, right, offsets, VOCAB_SIZE).tolist())


@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 5),
    acceptance=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    calls=st.integers(1, 6),
)
def test_drafts_drawn_one_by_one_are_the_drafts_drawn_at_once(seed, k, acceptance, calls):
    """PCG64 hands its 32-bit halves out in turn whether integers() is called once for k
    values or k times, so the scalar path draws the same offsets, call after call."""
    drafter = Drafter(k, acceptance, np.random.default_rng(seed), VOCAB_SIZE)
    reference = np.random.default_rng(seed)
    for call in range(calls):  # bounded: calls
        identity, n = 1_000 + call, 7 + call
        assert drafter._drafts(identity, n) == _drafts_drawn_at_once(
            reference, k, acceptance, identity, n
        )
    assert drafter.rng.bit_generator.state == reference.bit_generator.state


@pytest.mark.parametrize("k", [1, SCALAR_DRAWS_MAX, SCALAR_DRAWS_MAX + 1])
def test_k_drafts_each_a_token_after_the_special_ids(k):
    drafter = Drafter(k, 0.5, np.random.default_rng(3), VOCAB_SIZE)
    drafts = drafter._drafts(42, 5)
    assert len(drafts) == k and all(FIRST_TOKEN_ID <= t < VOCAB_SIZE for t in drafts)
