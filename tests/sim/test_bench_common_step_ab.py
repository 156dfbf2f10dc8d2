"""bench/common_step_ab.py on a window of three requests: both sides run, in alternating
order, with one fingerprint; the ratio is the two sides' medians divided."""

from __future__ import annotations

import argparse
import statistics

import pytest
from bench_loader import imported_bench


@pytest.fixture
def bench(monkeypatch):
    yield from imported_bench(monkeypatch, "common_step_ab", "replay_phases")


def _args(bench, rounds: int) -> argparse.Namespace:
    return argparse.Namespace(trace=str(bench.TRACE), max_requests=3, block_size=16, rounds=rounds)


def test_both_sides_run_alternately_and_report_one_fingerprint(bench, monkeypatch):
    order = []
    run_once = bench.run_once

    def recorded(args, common_step):
        order.append(common_step)
        return run_once(args, common_step)

    monkeypatch.setattr(bench, "run_once", recorded)
    report = bench.measure(_args(bench, rounds=3))
    assert order == [True, False, False, True, True, False]
    common, plain = bench.SIDES
    for key in bench.KEYS:
        runs = report[key]
        assert len(runs[common]) == len(runs[plain]) == 3 and min(runs[common] + runs[plain]) > 0
        want = statistics.median(runs[common]) / statistics.median(runs[plain])
        assert report[f"{key}_ratio"] == pytest.approx(want, rel=0.02)  # of rounded values
    assert report["requests"] == 3 and report["steps"] > 0 and len(report["fingerprint"]) == 64


def test_each_side_sets_the_executors_path(bench, monkeypatch):
    from schedcheck.sim.symbolic import SymbolicExecutor

    calls = []
    common_step = SymbolicExecutor._common_step

    def counted(self, *args):
        calls.append(self.use_common_step)
        return common_step(self, *args)

    monkeypatch.setattr(SymbolicExecutor, "_common_step", counted)
    args = _args(bench, rounds=1)
    with_common = bench.run_once(args, True)
    num_calls = len(calls)
    without = bench.run_once(args, False)
    assert num_calls > 0 and len(calls) == num_calls  # the second side never took it
    assert with_common["fingerprint"] == without["fingerprint"]
    assert with_common["steps"] == without["steps"] and with_common["decode_steps"] > 0
