"""bench/fuzz_phases.py on a few examples: every phase is counted once (none negative),
the phases add up to the campaign's CPU time, the checks ran on every step, and the
scenarios' draws are told apart from the rest of Hypothesis' work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def fuzz_phases(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # it imports fuzz_speed and replay_phases
    import fuzz_phases

    yield fuzz_phases
    for name in ("fuzz_phases", "fuzz_speed", "replay_phases"):
        sys.modules.pop(name, None)


def test_the_phases_of_a_few_examples_add_up_to_their_cpu_time(fuzz_phases):
    report = fuzz_phases.measure(8, seed=0)
    per_example = report["us_per_example"]
    assert report["examples"] >= 8 and report["steps"] > report["examples"]
    assert min(per_example.values()) >= 0, per_example  # nested phases counted once
    total_us = sum(per_example.values()) * report["examples"]
    assert total_us == pytest.approx(1e6 * report["cpu_s"], rel=1e-9)
    for name in ("symbolic executor (shadow KV)", "block-pool check (incremental)", "protocol"):
        assert report["us_per_step"][name] > 0, name
    assert per_example[fuzz_phases.DRAWING] > 0  # the scenario draws, apart from Hypothesis'
    assert fuzz_phases.DRAWING not in report["us_per_step"]  # outside the simulations
