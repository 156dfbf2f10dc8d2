"""fuzz/heap.py: a campaign's setup runs with the collector paused, what it left is
frozen while the campaign runs, and the freeze is undone after it (unless it was there
before); an engine's examples run the same either way."""

from __future__ import annotations

import gc

import pytest

from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.heap import SetupHeap
from schedcheck.fuzz.swarm import SwarmSpec


@pytest.fixture(autouse=True)
def no_freeze():
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable()


def test_the_setup_runs_with_the_collector_paused_and_its_objects_frozen():
    seen = []
    with SetupHeap() as heap:
        kept = heap.build(lambda n: seen.append(gc.isenabled()) or [object()] * n, 3)
        assert kept == [kept[0]] * 3 and seen == [False]
        assert gc.isenabled() and gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_failing_setup_turns_the_collector_back_on():
    def fail() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"), SetupHeap() as heap:
        heap.build(fail)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_paused_collector_and_an_earlier_freeze_are_left_as_found():
    gc.disable()
    gc.freeze()
    frozen = gc.get_freeze_count()
    with SetupHeap() as heap:
        heap.build(list)
    assert not gc.isenabled() and gc.get_freeze_count() >= frozen


def test_a_campaign_draws_and_finds_the_same_with_a_frozen_setup(tmp_path):
    """The same examples and coverage whether the process froze before or not."""
    options = CampaignOptions(
        spec=SwarmSpec(), seed=3, budget_s=1e6, examples_max=64, out_dir=str(tmp_path),
        db_dir=None,
    )  # fmt: skip
    plain = run_campaign(options)
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a process that froze before: the campaign leaves its freeze alone
    again = run_campaign(options)
    assert gc.get_freeze_count() > 0
    assert (again.examples, again.coverage, again.configs) == (
        plain.examples,
        plain.coverage,
        plain.configs,
    )
    assert not plain.found and not again.found
