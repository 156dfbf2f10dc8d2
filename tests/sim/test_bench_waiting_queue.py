"""bench/waiting_queue.py on a small burst of the reference engine: every request runs,
the steps are cut into ten tenths covering them all, and the queue drains across them."""

from __future__ import annotations

import itertools

from bench_loader import load_bench


def _bench():
    return load_bench("waiting_queue")


def test_a_burst_drains_and_its_steps_are_cut_into_tenths():
    report = _bench().measure("reference", 120)
    assert report["finished"] == 120
    tenths = report["tenths"]
    assert len(tenths) == 10
    assert tenths[0]["steps"][0] == 0 and tenths[-1]["steps"][1] == report["steps"] - 1
    assert all(a["steps"][1] == b["steps"][0] for a, b in itertools.pairwise(tenths))
    unfinished = [t["mean_unfinished"] for t in tenths]
    assert unfinished == sorted(unfinished, reverse=True) and unfinished[0] > 100 > unfinished[-1]
