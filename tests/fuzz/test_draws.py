"""A seed's draws do not depend on the modules a process loaded (fuzz/draws.py)."""

import importlib
import sys
from random import Random

import pytest
from hypothesis import given, seed
from hypothesis.internal.conjecture.data import ConjectureData

import schedcheck.fuzz.scenario as scenario_module
from schedcheck.fuzz import draws
from schedcheck.fuzz.scenario import scenarios
from schedcheck.fuzz.strategies import BOOLEANS
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.worker import WorkerJob, round_settings

# a module of literals spread over the ranges a scenario draws in (Hypothesis reads up to
# 1,024 constants a module, and no integer in (-100, 100): it draws those anyway)
LITERALS = ", ".join(str(n) for n in range(101, 20_000, 23))


def _drawn(rounds: int) -> list[str]:
    spec = SwarmSpec(engine="reference")
    job = WorkerJob(spec, campaign_seed=0, worker_index=0, budget_s=1e6, started_at_s=0, out_dir="")
    out: list[str] = []
    for r in range(rounds):
        test = round_settings(job, r)(
            seed(r)(given(scenarios(spec))(lambda s: out.append(s.dumps())))
        )
        test()
    return out


def test_a_seed_draws_the_same_examples_after_a_module_with_new_literals_loads(tmp_path):
    before = _drawn(12)
    (tmp_path / "many_literals.py").write_text(f"VALUES = ({LITERALS})\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module("many_literals")
        after = _drawn(12)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("many_literals", None)
    assert len(before) == 12 * 32 and after == before  # 48 of 384 differed without it


def test_leaf_draws_draw_what_draw_draws(monkeypatch):
    """LeafDraw takes the same choices and spans as `draw`: Hypothesis' mutations, which
    splice spans, then make the same examples, so every round draws the same scenarios."""
    draws._UNWRAPPED.clear()
    fast = _drawn(6)
    assert draws._UNWRAPPED, "the leaf draws took their own path"
    draws._UNWRAPPED.clear()
    plain = _drawn_plain(6, monkeypatch)
    assert not draws._UNWRAPPED
    assert len(fast) == 6 * 32 and fast == plain


def test_a_leaf_draw_at_a_value_hole_goes_through_draw():
    calls = []

    class Data:
        depth, frozen, index, prefix = 1, False, 0, (draws.ValueHole(3),)

        def draw(self, strategy, label=None):
            calls.append(strategy)
            return 3

    data = Data()
    data._ConjectureData__span_record = object()  # what LeafDraw looks for
    assert draws.LeafDraw(data.draw)(BOOLEANS) == 3 and calls == [BOOLEANS]


def _spans_and_value(strategy, data):
    value = data.draw(strategy)
    data.freeze()
    return [(s.label, s.start, s.end) for s in data.spans], data.choices, value.dumps()


def test_leaf_draws_make_the_spans_draw_makes(monkeypatch):
    """The shrinker and the mutator work on spans: LeafDraw's are `draw`'s, label for label."""
    strategy = scenarios(SwarmSpec(engine="reference"))
    for seed_value in range(4):
        fast = _spans_and_value(strategy, ConjectureData(random=Random(seed_value)))
        with monkeypatch.context() as patch:
            patch.setattr(scenario_module, "LeafDraw", lambda draw: draw)
            plain = _spans_and_value(strategy, ConjectureData.for_choices(fast[1]))
        assert len(fast[0]) > 20 and fast == plain


def test_only_the_first_call_empties_the_pools_of_constants():
    from hypothesis.internal.conjecture import providers

    draws.keep_draws_local_free()
    providers.CONSTANTS_CACHE[("integer", "sentinel")] = ((7,), ())
    draws.keep_draws_local_free()  # each round calls it: the pools built since are kept
    assert providers.CONSTANTS_CACHE[("integer", "sentinel")] == ((7,), ())
    assert not providers._get_local_constants().set_for_type("integer")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("UNWRAPPED_MAX", 0),  # a strategy built afresh each draw would grow the memory
        ("_LEAF_DRAWS", False),  # a Hypothesis older than the draw LeafDraw repeats
    ],
)
def test_leaf_draws_fall_back_to_draw(monkeypatch, name, value):
    """Past the bound of strategies, or on an older Hypothesis: `draw` itself, the same."""
    monkeypatch.setattr(draws, name, value)
    draws._UNWRAPPED.clear()
    assert _drawn(1) == _drawn_plain(1, monkeypatch)
    assert not draws._UNWRAPPED


def _drawn_plain(rounds, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(scenario_module, "LeafDraw", lambda draw: draw)
        return _drawn(rounds)
