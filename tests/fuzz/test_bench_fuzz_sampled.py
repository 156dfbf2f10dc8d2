"""bench/fuzz_sampled.py: each py-spy sample goes to the first phase its stack names (an
engine method under call_engine as the engine's), only the measured campaign's samples
count, the shares are exact, the child measures one campaign after its warm-up, and a
missing py-spy or a bad option exits 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
RUN = "<module> (bench/fuzz_sampled.py:9);measured_campaign (bench/fuzz_sampled.py:1)"
SIM = RUN + ";Simulation.run (sim/loop.py:150)"


@pytest.fixture
def fuzz_sampled(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # it imports replay_phases
    import fuzz_sampled

    yield fuzz_sampled
    for name in ("fuzz_sampled", "replay_phases"):
        sys.modules.pop(name, None)


def test_a_sample_goes_to_the_first_phase_its_stack_names(fuzz_sampled):
    phase_of, outside = fuzz_sampled.phase_of, fuzz_sampled.OUTSIDE
    loop = ["measured_campaign", "Simulation.run", "Simulation._turn"]
    assert phase_of([*loop, "call_engine", "ReferenceEngine.schedule", "x"]) == "engine schedule()"
    assert phase_of([*loop, "Intake.drain", "call_engine", "E.add_request"]) == (
        "engine add_request()"
    )
    build = ["measured_campaign", "Simulation.__init__", "call_engine", "E.schedule"]
    assert phase_of(build) == "construction"
    shadow_in_ledger = [*loop, "Ledger.retire", "SymbolicExecutor.execute"]
    assert phase_of(shadow_in_ledger) == "shadow KV"  # shadow KV is before ledger in PHASES
    assert phase_of([*loop, "Ledger.retire"]) == "ledger"
    assert phase_of([*loop, "Environment.step"]) == fuzz_sampled.SIMULATION
    assert phase_of(["measured_campaign", "_scenarios", "draw_plans"]) == fuzz_sampled.DRAWING
    assert phase_of(["measured_campaign", "ConjectureRunner.run"]) == outside


def test_only_the_measured_campaigns_samples_count(fuzz_sampled):
    raw = [
        f"{SIM};SymbolicExecutor.execute (sim/symbolic.py:190) 7\n",
        f"{SIM};Environment.step (simpy/core.py:182) 2\n",
        f"{SIM};SymbolicExecutor.execute (sim/symbolic.py:191) 3\n",
        f"{RUN};_scenarios (fuzz/scenario.py:140) 5\n",
        "<module> (bench/fuzz_sampled.py:9);run_campaign (fuzz/campaign.py:1) 100\n",
        "\n",
    ]
    samples = fuzz_sampled.aggregate(raw)
    assert dict(samples) == {
        "shadow KV": 10,
        fuzz_sampled.SIMULATION: 2,
        fuzz_sampled.DRAWING: 5,
    }
    result = fuzz_sampled.report(samples, examples=4, cpu_s=1.5)
    assert result["samples"] == 17 and result["examples"] == 4
    assert result["shares"] == {
        "shadow KV": 10 / 17,
        fuzz_sampled.DRAWING: 5 / 17,
        fuzz_sampled.SIMULATION: 2 / 17,
    }
    assert list(result["shares"]) == ["shadow KV", fuzz_sampled.DRAWING, fuzz_sampled.SIMULATION]
    with pytest.raises(AssertionError, match="no sample"):
        fuzz_sampled.report(fuzz_sampled.aggregate(raw[4:]), examples=4, cpu_s=1.0)


def test_the_child_measures_one_campaign_after_its_warm_up(fuzz_sampled, monkeypatch, tmp_path):
    seen = []
    measured = fuzz_sampled.measured_campaign

    def recorded(options):
        seen.append((options.seed, options.examples_max))
        return measured(options)

    monkeypatch.setattr(fuzz_sampled, "measured_campaign", recorded)
    counts = tmp_path / "counts"
    assert fuzz_sampled.main(["--child", str(counts), "--examples", "3", "--seed", "5"]) == 0
    assert seen == [(5, 3)]  # the warm-up (seed 1005) is not the measured campaign
    examples, cpu_s = counts.read_text().split()
    assert int(examples) >= 3 and float(cpu_s) > 0


def test_without_py_spy_or_with_a_bad_option_it_exits_2(fuzz_sampled, monkeypatch, capsys):
    monkeypatch.setattr(fuzz_sampled.shutil, "which", lambda *args, **kwargs: None)
    assert fuzz_sampled.main(["--examples", "2"]) == 2
    assert "needs py-spy" in capsys.readouterr().err
    for bad in (["--examples", "0"], ["--rate", "0"], ["--examples", "x"]):
        with pytest.raises(SystemExit) as exit_:
            fuzz_sampled.parse_args(bad)
        assert exit_.value.code == 2
