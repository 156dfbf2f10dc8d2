"""bench/replay_speed.py on a window of three requests, in pairs: every pair replays the
same schedule checked and bare, the ratio reported is the median of the pairs' ratios, the
first pair's is kept apart, and a window shorter than --rss-at-requests reports no growth."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import pytest
from bench_loader import imported_bench


@pytest.fixture
def bench(monkeypatch):
    yield from imported_bench(monkeypatch, "replay_speed", "replay_phases")


def _args(bench, tmp_path: Path, pairs: int) -> argparse.Namespace:
    return argparse.Namespace(
        trace=str(bench.TRACE), max_requests=3, duration_s=None, time_scale=1.0,
        block_size=16, block_manager="hashed", num_blocks=2048, progress=False,
        invariants_only=False, curve=str(tmp_path / "curve.jsonl"), rss_at_requests=1000,
        pairs=pairs,
    )  # fmt: skip


def test_three_pairs_report_their_ratios_and_the_median(bench, tmp_path):
    report = bench.run_pairs(_args(bench, tmp_path, pairs=3))
    ratios = report["invariant_overhead_pairs"]
    assert len(ratios) == 3 and min(ratios) > 0
    assert report["invariant_overhead"] == statistics.median(ratios)
    assert report["invariant_overhead_first"] == ratios[0]
    full, bare = report["invariants"], report["bare"]
    assert full["fingerprint"] == bare["fingerprint"] and full["requests"] == 3
    assert full["finished"] == 3 and full["num_gpu_blocks"] == 2048
    assert report["peak_rss_mb_at_1000_requests"] is None  # three requests seen, not 1,000
    assert report["peak_rss_growth"] is None and report["peak_rss_mb"] > 0


def test_only_the_first_checked_run_writes_the_curve(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench.Curve, "SAMPLE_STEPS", 4)
    paths = []
    init = bench.Curve.__init__

    def remember_path(self, sim, at_requests, path=None):
        paths.append(path)
        init(self, sim, at_requests, path)

    monkeypatch.setattr(bench.Curve, "__init__", remember_path)
    report = bench.run_pairs(_args(bench, tmp_path, pairs=2))
    assert paths == [str(tmp_path / "curve.jsonl"), None]  # a later run would overwrite it
    samples = (tmp_path / "curve.jsonl").read_text().splitlines()
    assert len(samples) == report["invariants"]["steps"] // 4


def test_invariants_only_reports_no_bare_run_and_no_overhead(bench, tmp_path):
    args = _args(bench, tmp_path, pairs=1)
    args.invariants_only = True
    report = bench.run_pairs(args)
    assert report["bare"] is None and report["invariants"]["finished"] == 3
    assert report["invariant_overhead"] is None and report["invariant_overhead_pairs"] == []
    assert report["faster_than_real_time_cpu"] == report["invariants"]["sim_per_cpu"]


def test_the_warm_up_child_replays_a_few_requests_and_its_cpu_is_returned(
    bench, tmp_path, monkeypatch
):
    monkeypatch.setattr(bench, "WARMUP_REQUESTS", 2)
    calls = []
    run = bench.subprocess.run

    def recorded(command, **kw):
        calls.append(command)
        return run(command, **kw)

    monkeypatch.setattr(bench.subprocess, "run", recorded)
    cpu_s = bench.warm_kernels(_args(bench, tmp_path, pairs=1))
    assert cpu_s > 0 and len(calls) == 1
    command = calls[0]
    assert command[command.index("--max-requests") + 1] == "2"
    assert command[command.index("--num-blocks") + 1] == str(bench.WARMUP_NUM_BLOCKS)
    assert "--no-warmup" in command  # the child does not warm up a child of its own
