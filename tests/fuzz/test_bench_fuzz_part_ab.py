"""bench/fuzz_part_ab.py on a few examples: both sides fuzz the same examples in turns,
the first side alternating, with the switch set for each; the part is timed and called
equally often on both; the switch and the part are put back after; bad options exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from schedcheck.sim.symbolic import SymbolicExecutor

BENCH = Path(__file__).resolve().parents[2] / "bench"
SWITCH = "schedcheck.sim.symbolic:SymbolicExecutor.use_common_step"
PART = "schedcheck.sim.symbolic:SymbolicExecutor.execute"


@pytest.fixture
def fuzz_part_ab(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # it imports lockstep and replay_phases
    import fuzz_part_ab

    yield fuzz_part_ab
    for name in ("fuzz_part_ab", "lockstep", "replay_phases"):
        sys.modules.pop(name, None)


def test_both_sides_fuzz_the_same_examples_in_turns(fuzz_part_ab, monkeypatch):
    seen = []  # (the switch, the seed) of each campaign
    run_campaign = fuzz_part_ab.run_campaign

    def recorded(options):
        seen.append((SymbolicExecutor.use_common_step, options.seed))
        return run_campaign(options)

    monkeypatch.setattr(fuzz_part_ab, "run_campaign", recorded)
    execute = SymbolicExecutor.execute
    args = fuzz_part_ab.parse_args(["--switch", SWITCH, "--part", PART, "--turns", "3",
                                    "--examples-per-turn", "3"])  # fmt: skip
    r = fuzz_part_ab.measure(args)
    # untimed setup, then turns: the switch on first in even turns, off first in odd ones
    assert seen == [(True, 0), (False, 0), (True, 1000), (False, 1000), (False, 1001),
                    (True, 1001), (True, 1002), (False, 1002)]  # fmt: skip
    assert r["examples"] >= 9 and r["part_calls"] > r["examples"]  # a few steps an example
    assert min(r["part_cpu_s"].values()) > 0 and min(r["campaign_cpu_s"].values()) > 0
    on, off = (r["part_cpu_s"][side] for side in fuzz_part_ab.SIDES)
    assert r["part_off_over_on"] == pytest.approx(off / on)
    assert r["saved_share_of_campaign"] == pytest.approx((off - on) / r["campaign_cpu_s"]["off"])
    assert SymbolicExecutor.execute is execute and SymbolicExecutor.use_common_step is True


def test_unequal_calls_of_the_part_are_refused(fuzz_part_ab, monkeypatch):
    """A switch that changes how often the part runs compares different work."""
    args = fuzz_part_ab.parse_args(
        ["--switch", SWITCH, "--part", "schedcheck.sim.symbolic:SymbolicExecutor._step",
         "--turns", "1", "--examples-per-turn", "4"]
    )  # fmt: skip
    with pytest.raises(AssertionError, match="unequally often"):
        fuzz_part_ab.measure(args)
    assert SymbolicExecutor.use_common_step is True


@pytest.mark.parametrize(
    "argv",
    [
        ["--switch", "schedcheck.sim.symbolic:Nope.x", "--part", PART],
        ["--switch", SWITCH, "--part", "no_such_module:f.g"],
        ["--switch", SWITCH, "--part", PART, "--turns", "0"],
        ["--part", PART],
    ],
)
def test_bad_options_exit_2(fuzz_part_ab, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        fuzz_part_ab.parse_args(argv)
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err
