"""fuzz/mutator_groups.py computes what Hypothesis' own visitor computes."""

import contextlib
from random import Random

import pytest
from hypothesis import strategies as st
from hypothesis.control import BuildContext
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture import data as conjecture_data
from hypothesis.internal.conjecture.data import ConjectureData
from test_draws import _drawn

from schedcheck.fuzz import mutator_groups
from schedcheck.fuzz.scenario import scenarios
from schedcheck.fuzz.swarm import SwarmSpec

pytestmark = pytest.mark.skipif(
    not mutator_groups._supported(), reason="a Hypothesis mutator_groups does not repeat"
)


def _spans(strategy, seed_value):
    data = ConjectureData(random=Random(seed_value))
    with BuildContext(data, wrapped_test=_spans), contextlib.suppress(StopTest):
        data.draw(strategy)  # an overrun still leaves spans to mutate
    data.freeze()
    return data.spans


def _hypothesis_groups(spans):
    return conjecture_data._mutator_groups(spans).run()


def test_the_groups_of_scenarios_are_hypothesis_own():
    strategy = scenarios(SwarmSpec(engine="reference"))
    num_groups = 0
    for seed_value in range(40):
        spans = _spans(strategy, seed_value)
        groups = mutator_groups.mutator_groups(spans)
        assert groups == _hypothesis_groups(spans)  # the same sets, in the same order
        num_groups += len(groups)
    assert num_groups > 40  # scenarios have labels drawn twice or more


UNIQUE_NESTED = st.lists(
    st.tuples(
        st.lists(st.lists(st.integers(0, 5), max_size=3), unique_by=len, max_size=4),
        st.sets(st.integers(0, 9), max_size=4),
        st.lists(st.integers(0, 3), max_size=5),
    ),
    max_size=5,
)


def test_spans_inside_unique_collections_are_left_out_as_hypothesis_leaves_them():
    left_out = 0
    for seed_value in range(200):
        spans = _spans(UNIQUE_NESTED, seed_value)
        groups = mutator_groups.mutator_groups(spans)
        assert groups == _hypothesis_groups(spans)
        left_out += sum(map(len, groups)) < len(spans)
    assert left_out > 50  # the unique collections hid spans in many examples


def test_a_wrong_end_fails_the_comparison():
    """The comparison can fail: an end off by one is not Hypothesis' group."""
    spans = _spans(scenarios(SwarmSpec(engine="reference")), 3)
    groups = mutator_groups.mutator_groups(spans)
    shifted = [{(s, e + 1) for s, e in g} for g in groups]
    assert groups and shifted != _hypothesis_groups(spans)


def test_install_is_idempotent_and_rounds_draw_the_same_scenarios(monkeypatch):
    """Every mutation is Hypothesis' own, so four rounds draw the same 128 scenarios."""
    assert mutator_groups.install()
    fast = conjecture_data.Spans.__dict__["mutator_groups"]
    assert mutator_groups.install() and conjecture_data.Spans.__dict__["mutator_groups"] is fast
    calls = []
    with monkeypatch.context() as patch:
        counted = mutator_groups.mutator_groups

        def counting(spans):
            calls.append(len(spans))
            return counted(spans)

        patch.setattr(fast, "func", counting)
        patch.setattr(mutator_groups, "install", lambda: True)  # keeps the counting one
        installed = _drawn(4)
    assert len(calls) > 20  # the rounds mutated examples through it
    with monkeypatch.context() as patch:
        patch.setattr(conjecture_data.Spans, "mutator_groups", mutator_groups.HYPOTHESIS_OWN)
        patch.setattr(mutator_groups, "install", lambda: False)
        plain = _drawn(4)
    assert len(installed) == 4 * 32 and installed == plain


def test_an_unknown_hypothesis_keeps_its_own_visitor(monkeypatch):
    monkeypatch.setattr(conjecture_data.Spans, "mutator_groups", mutator_groups.HYPOTHESIS_OWN)
    monkeypatch.setattr(mutator_groups, "GROUPS_SINCE", (99, 0))
    assert not mutator_groups.install()
    assert conjecture_data.Spans.__dict__["mutator_groups"] is mutator_groups.HYPOTHESIS_OWN
