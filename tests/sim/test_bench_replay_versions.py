"""bench/replay_versions.py on a window of three requests: two versions (here the
installed schedcheck twice, the base linked into a directory of its own by
`lockstep.link_installed`) replay in turns, a slice each, alternating which goes first,
and report one schedule."""

from __future__ import annotations

import importlib

import pytest
from bench_loader import imported_bench


@pytest.fixture
def bench(monkeypatch):
    yield from imported_bench(
        monkeypatch, "replay_versions", "lockstep", "replay_lockstep", "replay_phases"
    )


def test_two_versions_replay_in_turns_a_slice_each(bench, monkeypatch, tmp_path):
    asked = []

    class Recorded(bench.Child):
        def ask(self, line):
            asked.append(self.name)
            return super().ask(line)

    monkeypatch.setattr(bench, "Child", Recorded)
    base_path = importlib.import_module("lockstep").link_installed(tmp_path / "path")
    args = bench.parse_args(
        ["--base-path", str(base_path), "--max-requests", "3", "--slice-s", "0.2"]
    )
    out = bench.measure(args, base_path)
    base, head = out["base"], out["head"]
    num_slices = base["slices"]
    assert num_slices >= 10 and head["slices"] == num_slices
    # a slice each a turn, base first in even turns, head first in odd ones
    want = [name for t in range(num_slices) for name in (("base", "head"), ("head", "base"))[t % 2]]
    assert asked == want
    assert out["same_schedule"] and base["fingerprint"] == head["fingerprint"]
    assert base["steps"] == head["steps"] == 796
    assert out["cpu_ratio"] == pytest.approx(head["cpu_s"] / base["cpu_s"])
    assert base["imported_from"] == str(base_path / "schedcheck") != head["imported_from"]
    lo, hi = out["slice_ratio_quartiles"]
    assert lo <= out["slice_ratio_median"] <= hi


def test_the_base_is_required_and_the_counts_positive(bench, capsys):
    for argv in (["--max-requests", "3"], ["--base-path", "x", "--repeat", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            bench.parse_args(argv)
        assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "give the base" in err and "--repeat must be >= 1" in err
