"""A crash of the harness itself is a finding with its traceback and a bundle that replays;
a run with nothing left to run is a liveness report, never SimPy's RuntimeError."""

import json

import pytest

from schedcheck.cli.entry import main
from schedcheck.engines.protocol import EngineConfig
from schedcheck.fuzz.scenario import Scenario
from schedcheck.fuzz.verdict import judge
from schedcheck.fuzz.worker import save_scenario_bundle
from schedcheck.sim import loop
from schedcheck.sim.arrivals import Arrivals
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.traces import TraceRequest

REQUESTS = (
    TraceRequest("r0", 0.0, 4, prompt_token_ids=tuple(range(100, 120))),
    TraceRequest("r1", 0.01, 3, prompt_token_ids=tuple(range(200, 209))),
)
CONFIG = EngineConfig(block_size=4, num_gpu_blocks=32, max_num_batched_tokens=8)


@pytest.fixture
def crashing_executor(monkeypatch):
    """The symbolic executor raises at its fourth step (a bug of the harness)."""
    original = SymbolicExecutor.execute

    def execute(self, meta):
        if meta.output.step == 3:
            raise IndexError("boolean index did not match indexed array")
        return original(self, meta)

    monkeypatch.setattr(SymbolicExecutor, "execute", execute)


def test_the_crash_is_a_violation_with_its_traceback(crashing_executor):
    result = loop.run(REQUESTS, "reference", CONFIG, loop.SimOptions())
    [crash] = result.violations
    assert crash.headline() == (
        "step 3: harness-crash:: the harness raised IndexError: boolean index did not match "
        "indexed array"
    )
    assert crash.found.startswith("Traceback (most recent call last):")
    assert 'raise IndexError("boolean index did not match indexed array")' in crash.found
    assert result.exit_code == 1 and result.steps == 3


def test_the_crash_bundle_replays_the_crash(crashing_executor, tmp_path, capsys):
    result = loop.run(REQUESTS, "reference", CONFIG, loop.SimOptions())
    bundle = save_bundle(tmp_path / "crash", result)
    code = main(["replay", "--bundle", str(bundle), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["reproduced"]) == (1, True)
    assert [v["invariant"] for v in report["violations"]] == ["harness-crash"]
    assert report["fingerprint"] == result.fingerprint


def test_the_fuzzer_sees_a_finding_with_a_bundle(crashing_executor, tmp_path):
    scenario = Scenario("reference", REQUESTS, CONFIG)
    verdict = judge(scenario)
    assert (verdict.failed, verdict.kind) == (True, "harness-crash")
    bundle = save_scenario_bundle(tmp_path / "b", scenario)
    assert bundle is not None
    violations = json.loads((tmp_path / "b" / "violations.json").read_text())
    assert violations[0]["found"].startswith("Traceback")


def test_ignored_it_ends_the_run_without_a_finding(crashing_executor):
    options = loop.SimOptions(ignore=("harness-crash",))
    result = loop.run(REQUESTS, "reference", CONFIG, options)
    assert (result.violations, result.ignored, result.steps) == ([], {"harness-crash": 1}, 3)


def test_out_of_events_is_a_liveness_report(monkeypatch):
    """Without the lost-request check, the loop would wait for a later turn whose parent the
    engine never reported: SimPy runs out of events; that is reported, not raised."""
    monkeypatch.setattr(loop, "check_not_lost", lambda *args: [])
    parent = REQUESTS[0]
    later = TraceRequest("r1", 0.0, 2, prompt_token_ids=(5, 6), parent_request_id="r0")
    result = loop.run((parent, later), "adapters_broken:make_swallows_finish", CONFIG)
    assert result.exit_code == loop.EXIT_LIVENESS
    why = "nothing left to run (SimPy out of events)"
    assert result.stuck == {
        "*": why,
        "r0": f"{why}: live, never reported finished",
        "r1": f"{why}: a later turn waiting for r0",
    }


def test_a_crash_in_the_arrivals_process_is_a_harness_crash_too(monkeypatch):
    def full_prompt(self, request):
        raise KeyError(request.request_id)

    monkeypatch.setattr(Arrivals, "full_prompt", full_prompt)
    result = loop.run(REQUESTS, "reference", CONFIG, loop.SimOptions())
    assert [v.headline() for v in result.violations] == [
        "step 0: harness-crash:: the harness raised KeyError: 'r0'"
    ]
    assert "in full_prompt" in result.violations[0].found
