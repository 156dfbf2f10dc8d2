"""bench/replay_lockstep.py on a window of three requests: the checked and the bare run
take turns slice by slice, run the same slices, report one fingerprint, and the totals
are the slices' sums."""

from __future__ import annotations

import argparse

import pytest
from bench_loader import imported_bench


@pytest.fixture
def bench(monkeypatch):
    yield from imported_bench(monkeypatch, "replay_lockstep", "replay_phases")


def _args(bench, slice_s: float) -> argparse.Namespace:
    return argparse.Namespace(
        trace=str(bench.TRACE), max_requests=3, block_size=16, slice_s=slice_s, min_slice_cpu_s=0.0
    )


def test_the_two_runs_take_turns_slice_by_slice(bench, monkeypatch):
    batons = []

    class Recorded(bench.Baton):
        def __init__(self) -> None:
            super().__init__()
            batons.append(self)

    monkeypatch.setattr(bench, "Baton", Recorded)
    slices = []
    run_side = bench.run_side

    def recorded(side, sim, slice_s, baton, cpu_s):
        out = run_side(side, sim, slice_s, baton, cpu_s)
        slices.append((side, list(cpu_s)))
        return out

    monkeypatch.setattr(bench, "run_side", recorded)
    report = bench.measure(_args(bench, slice_s=0.2))
    (baton,) = batons
    num_slices = report["slices"]
    assert num_slices >= 10  # 796 steps over 5 simulated seconds
    # checked first, then strictly alternating: one turn a slice on each side
    assert baton.turns == [0, 1] * num_slices and report["turns"] == 2 * num_slices
    cpu = dict(slices)
    assert len(cpu[0]) == len(cpu[1]) == num_slices and min(cpu[0] + cpu[1]) >= 0
    assert report["checked_cpu_s"] == pytest.approx(sum(cpu[0]))
    assert report["bare_cpu_s"] == pytest.approx(sum(cpu[1]))
    assert report["invariant_overhead"] == pytest.approx(sum(cpu[0]) / sum(cpu[1]))
    assert report["steps"] == 796 and len(report["fingerprint"]) == 64
    assert report["slices_compared"] == num_slices


def test_fewer_slices_when_they_are_longer(bench):
    short, long = (bench.measure(_args(bench, s)) for s in (0.2, 1.0))
    assert long["slices"] < short["slices"]
    assert long["fingerprint"] == short["fingerprint"] and long["steps"] == short["steps"]


def test_a_slice_ends_at_the_first_multiple_at_or_above_the_event(bench):
    assert bench.slice_end_s(0.0, 10.0) == 10.0
    assert bench.slice_end_s(10.0, 10.0) == 10.0
    assert bench.slice_end_s(10.01, 10.0) == 20.0
    assert bench.slice_end_s(35.0, 10.0) == 40.0  # the slices no event falls in are skipped


def test_a_side_that_finished_never_takes_the_baton_again(bench):
    baton = bench.Baton()
    baton.take(0)
    baton.hand_over(0, done=True)
    baton.take(1)  # side 1's turn now
    baton.hand_over(1)  # side 0 is done: the baton stays with side 1
    baton.take(1)
    assert baton.turns == [0, 1, 1]
