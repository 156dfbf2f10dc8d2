"""fuzz/verdict_memo.py: a scenario judged once is answered from memory, the least recently
judged forgotten first; a campaign with the memo is the campaign without it, repeats
counted."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from schedcheck.engines.protocol import EngineConfig
from schedcheck.fuzz import verdict_memo, worker
from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.verdict_memo import VerdictMemo, scenario_key
from schedcheck.traces.schema import TraceRequest


def _scenario(seed: int = 0, output_length: int = 3) -> Scenario:
    request = TraceRequest(
        request_id="r0",
        arrival_time_s=0.0,
        output_length=output_length,
        prompt_token_ids=tuple(range(100, 120)),
    )
    config = EngineConfig(block_size=4, num_gpu_blocks=32, max_num_batched_tokens=16)
    return Scenario(engine="reference", requests=(request,), config=config, seed=seed)


@pytest.fixture
def runs(monkeypatch):
    """The scenarios actually run, in order (verdict_memo's judge counted)."""
    ran: list[Scenario] = []
    real = verdict_memo.judge

    def counting(scenario):
        ran.append(scenario)
        return real(scenario)

    monkeypatch.setattr(verdict_memo, "judge", counting)
    return ran


def test_equal_scenarios_share_a_key_and_any_change_makes_another():
    assert scenario_key(_scenario()) == scenario_key(_scenario())
    assert scenario_key(_scenario(seed=1)) != scenario_key(_scenario())
    assert scenario_key(_scenario(output_length=4)) != scenario_key(_scenario())
    ignoring = dataclasses.replace(_scenario(), ignore=("liveness",))
    assert scenario_key(ignoring) != scenario_key(_scenario())


def test_a_repeated_scenario_is_answered_without_running_it(runs):
    memo = VerdictMemo()
    first, repeated = memo.judge(_scenario())
    assert not repeated and not first.failed and first.result is not None
    again, repeated = memo.judge(_scenario())  # an equal scenario, another object
    assert repeated and again is first
    assert len(runs) == 1 and (memo.runs, memo.hits) == (1, 1)


def test_the_least_recently_judged_is_forgotten_first(runs):
    memo = VerdictMemo(capacity=2)
    a, b, c = _scenario(seed=0), _scenario(seed=1), _scenario(seed=2)
    for scenario in (a, b, a, c):  # c pushes out b (a was judged again after b)
        memo.judge(scenario)
    assert [s.seed for s in runs] == [0, 1, 2]
    assert memo.judge(a)[1] and not memo.judge(b)[1]  # a kept, b run again
    assert [s.seed for s in runs] == [0, 1, 2, 1]
    with pytest.raises(AssertionError):
        VerdictMemo(capacity=0)


def test_a_campaign_with_the_memo_is_the_campaign_without_it(tmp_path, monkeypatch):
    """The same examples, coverage, config tallies and findings; only the runs differ, and
    the repeats are counted (every round starts from the same simplest example)."""
    messages: list[dict] = []

    def campaign(out: str):
        messages.clear()
        options = CampaignOptions(
            spec=SwarmSpec(engine="reference"), seed=3, workers=1, budget_s=600.0,
            examples_max=128, out_dir=str(tmp_path / out), db_dir=None,
        )  # fmt: skip
        return run_campaign(options, on_message=messages.append)

    with_memo = campaign("memo")
    repeats = sum(m.get("repeats", 0) for m in messages if m["type"] == "progress")
    assert repeats >= 3  # rounds 1, 2 and 3 start from round 0's first scenario

    def run_every_time(self, scenario):
        self.runs += 1
        return verdict_memo.judge(scenario), False

    monkeypatch.setattr(VerdictMemo, "judge", run_every_time)
    without = campaign("none")
    assert sum(m.get("repeats", 0) for m in messages if m["type"] == "progress") == 0
    fields = ("examples", "coverage", "configs", "finding", "clean_failures")
    assert {f: getattr(with_memo, f) for f in fields} == {f: getattr(without, f) for f in fields}
    assert with_memo.examples == 128


@settings(max_examples=60, deadline=None)
@given(scenarios(SwarmSpec(engine="reference")), scenarios(SwarmSpec(engine="reference")))
def test_keys_are_equal_exactly_when_the_canonical_json_is(a, b):
    """The key is the scenario's own equality: a bundle's JSON read back has the same key,
    and two drawn scenarios share a key iff their canonical JSON is the same."""
    assert scenario_key(Scenario.from_json_text(a.dumps())) == scenario_key(a)
    assert (scenario_key(a) == scenario_key(b)) == (a.dumps() == b.dumps())
    hash(scenario_key(a))


def test_the_key_holds_every_field_of_the_scenario():
    """A field added to Scenario or EngineConfig later is in the key with no change here."""
    key = scenario_key(_scenario())
    assert len(key) == len(dataclasses.fields(Scenario))
    assert len(key[0]) == len(dataclasses.fields(EngineConfig))
    extra = dataclasses.replace(_scenario().config, extra={"b": "1", "a": "2"})
    reordered = dataclasses.replace(_scenario().config, extra={"a": "2", "b": "1"})
    scenario = _scenario()
    assert scenario_key(dataclasses.replace(scenario, config=extra)) == scenario_key(
        dataclasses.replace(scenario, config=reordered)
    )
    assert scenario_key(dataclasses.replace(scenario, config=extra)) != scenario_key(scenario)


def test_a_finding_is_shrunk_judging_each_scenario_once(tmp_path, runs, monkeypatch):
    """ddmin's candidates and the shrunk scenario's last verdict come from the finding's
    own memo: no scenario of the shrink runs twice (judging every time, some do), and the
    finding is the same."""
    shrink_started_at: list[int] = []  # runs before the shrink began
    real_shrink = worker.shrink_scenario

    def shrink(scenario, still_fails):
        shrink_started_at.append(len(runs))
        return real_shrink(scenario, still_fails)

    monkeypatch.setattr(worker, "shrink_scenario", shrink)

    def campaign(out: str):
        runs.clear()
        shrink_started_at.clear()
        options = CampaignOptions(
            spec=SwarmSpec(engine="toy_engine:make_swap_engine"), seed=7, workers=1,
            budget_s=60.0, out_dir=str(tmp_path / out), db_dir=None, shrink_runs_max=50,
        )  # fmt: skip
        result = run_campaign(options)
        assert result.found and len(shrink_started_at) == 1
        shrink_keys = [scenario_key(s) for s in runs[shrink_started_at[0] :]]
        return result.finding, len(shrink_keys), len(set(shrink_keys))

    finding, num_runs, num_distinct = campaign("memo")
    assert num_runs == num_distinct >= 2

    def run_every_time(self, scenario):
        self.runs += 1
        return verdict_memo.judge(scenario), False

    monkeypatch.setattr(VerdictMemo, "judge", run_every_time)
    finding_without, num_runs_without, num_distinct_without = campaign("none")
    assert num_distinct_without == num_distinct and num_runs_without > num_runs
    keys = ("round", "kind", "signature", "headline", "scenario", "shrunk_requests")
    assert {k: finding[k] for k in keys} == {k: finding_without[k] for k in keys}
