"""Campaigns: the same seed gives the same campaign; the toy engine's faults are found and
shrunk to <= 4 requests; the failure database is replayed first; Ctrl-C keeps findings."""

import glob
import json
import os
import signal
import threading
import time

import pytest

from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.worker import WorkerJob, run_worker


def _campaign(tmp_path, spec, **kw):
    opts = dict(
        spec=spec,
        seed=7,
        budget_s=60.0,
        out_dir=str(tmp_path / "out"),
        db_dir=None,
        shrink_runs_max=50,  # the bound on shrinking, not the clock (the two-worker test's
        shrink_budget_s=600.0,  # old flake was the draws, not the clock: fuzz/draws.py)
    )
    opts.update(kw)
    return run_campaign(CampaignOptions(**opts))


def _job_of(tmp_path, spec, **kw):
    return WorkerJob(
        spec=spec,
        campaign_seed=7,
        budget_s=60.0,
        started_at_s=time.time(),
        out_dir=str(tmp_path / "out"),
        examples_per_round=4,
        **kw,
    )


def _same(a, b):
    keys = (
        "round",
        "worker",
        "round_seed",
        "examples_in_round",
        "kind",
        "headline",
        "scenario",
        "shrunk_requests",
    )
    return {k: a.finding[k] for k in keys} == {k: b.finding[k] for k in keys}


@pytest.mark.parametrize(
    "engine", ["toy_engine:make_swap_engine", "toy_engine:make_stale_token_engine"]
)
def test_the_toy_engines_faults_are_found_and_shrunk(tmp_path, engine):
    result = _campaign(tmp_path, SwarmSpec(engine=engine))
    assert result.found and result.finding["shrunk_requests"] <= 4
    assert result.finding["time_to_detect_s"] < 30
    assert os.path.isfile(os.path.join(result.finding["bundle"], "violations.json"))
    assert result.raw and os.path.isdir(result.raw[0]["bundle"])  # kept from first sight


def test_same_seed_same_campaign_with_a_finding(tmp_path):
    spec = SwarmSpec(mutant="hash-no-parent")
    a = _campaign(tmp_path / "a", spec)
    b = _campaign(tmp_path / "b", spec)
    assert a.found and _same(a, b) and a.examples == b.examples
    other = _campaign(tmp_path / "c", spec, seed=8)
    assert other.finding["round_seed"] != a.finding["round_seed"]


def test_same_seed_same_campaign_without_a_finding(tmp_path):
    spec = SwarmSpec(engine="toy_engine:make_engine")
    a = _campaign(tmp_path / "a", spec, examples_max=64)
    b = _campaign(tmp_path / "b", spec, examples_max=64)
    assert not a.found and not a.clean_failures
    assert (a.examples, a.coverage) == (b.examples, b.coverage) and a.examples >= 64


def test_two_spawned_workers_find_what_one_finds(tmp_path):
    spec = SwarmSpec(engine="toy_engine:make_swap_engine")
    a = _campaign(tmp_path / "a", spec, workers=2)
    b = _campaign(tmp_path / "b", spec, workers=2)
    one = _campaign(tmp_path / "one", spec, workers=1)
    assert a.found and not a.errors and _same(a, b) and _same(a, one)
    assert a.finding["round"] == 0 and a.finding["worker"] == 0  # round 0 is worker 0's
    assert os.path.basename(a.finding["bundle"]) == "r0-shrunk"


def test_workers_deal_rounds_of_one_stream_in_turn(tmp_path):
    spec = SwarmSpec(engine="toy_engine:make_engine")
    seen = []
    job = _job_of(tmp_path, spec, worker_index=1, rounds_stride=3)
    run_worker(job, seen.append, lambda r: r > 7, lambda: False)
    assert [m["round"] for m in seen if m["type"] == "progress"] == [1, 4, 7]


def test_the_failure_database_is_replayed_first(tmp_path):
    spec = SwarmSpec(engine="toy_engine:make_swap_engine")
    db = str(tmp_path / "db")
    first = _campaign(tmp_path, spec, db_dir=db)
    again = _campaign(tmp_path, spec, db_dir=db)
    assert first.found and not first.replayed
    assert again.replayed and not again.finding["changed"] and again.examples == 0
    assert again.finding["replayed_from"]["bundle"] == first.finding["bundle"]
    for key in ("kind", "headline", "scenario"):
        assert again.finding[key] == first.finding[key]
    assert again.finding["bundle"] != first.finding["bundle"]  # written anew under --out
    assert _violations(again.finding["bundle"]) == _violations(first.finding["bundle"])
    other = _campaign(tmp_path, SwarmSpec(engine="toy_engine:make_stale_token_engine"), db_dir=db)
    assert not other.replayed, "findings are kept per target"


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals reach the main thread only",
)
def test_ctrl_c_stops_the_campaign_and_keeps_what_it_has(tmp_path):
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    result = _campaign(tmp_path, SwarmSpec(engine="toy_engine:make_engine"), budget_s=120.0)
    timer.join()
    assert result.interrupted and not result.found
    assert time.monotonic() - started < 30
    assert result.examples > 0


def _violations(bundle):
    with open(os.path.join(bundle, "violations.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _tree(path):
    return {
        p: open(p, "rb").read()
        for p in sorted(glob.glob(f"{path}/**", recursive=True))
        if os.path.isfile(p)
    }


def test_a_replayed_finding_that_fails_differently_is_reported_as_it_fails_now(
    tmp_path, monkeypatch
):
    spec = SwarmSpec(engine="toy_engine:make_changing_engine")
    db = str(tmp_path / "db")
    monkeypatch.setenv("TOY_ENGINE_FAULT", "swap-blocks")
    first = _campaign(tmp_path / "one", spec, db_dir=db)
    old_bundle = first.finding["bundle"]
    old_files = _tree(old_bundle)
    monkeypatch.setenv("TOY_ENGINE_FAULT", "stale-token")  # the engine's bug changed
    now = _campaign(tmp_path / "two", spec, db_dir=db)
    alone = _campaign(tmp_path / "alone", SwarmSpec(engine="toy_engine:make_stale_token_engine"))
    assert now.replayed and now.examples == 0
    finding = now.finding
    assert finding["changed"] and finding["kind"] != first.finding["kind"]
    assert finding["kind"] == alone.finding["kind"]  # what the new bug is found as
    assert finding["replayed_from"] == {
        "bundle": old_bundle,
        "kind": first.finding["kind"],
        "signature": first.finding["signature"],
        "headline": first.finding["headline"],
    }
    new_violations = _violations(finding["bundle"])
    assert new_violations[0]["invariant"] == finding["kind"]
    assert finding["headline"] != first.finding["headline"]
    assert finding["bundle"].startswith(str(tmp_path / "two" / "out"))
    assert finding["raw_bundle"].startswith(str(tmp_path / "two" / "out"))
    assert [r["bundle"] for r in now.raw] == [finding["raw_bundle"]]
    assert _violations(finding["raw_bundle"])[0]["invariant"] == finding["kind"]
    assert _tree(old_bundle) == old_files  # the recorded bundle is left as it was


def test_the_config_tally_counts_drafts_kv_groups_and_each_extra_option():
    from schedcheck.engines.protocol import EngineConfig
    from schedcheck.fuzz.scenario import Scenario
    from schedcheck.fuzz.worker import tally_config
    from schedcheck.traces.schema import TraceRequest

    configs: dict[str, dict[str, int]] = {}
    one = (TraceRequest("r0", 0.0, 1, prompt_token_ids=(7,)),)
    plain = Scenario(engine="reference", requests=one, config=EngineConfig(block_size=4))
    drawn = Scenario(
        engine="vllm-v1",
        requests=one,
        config=EngineConfig(
            block_size=4,
            num_speculative_tokens=2,
            kv_groups="full,sliding:8",
            extra={"policy": "priority", "async_scheduling": "true"},
        ),
    )
    for scenario in (plain, drawn, drawn):
        tally_config(configs, scenario)
    assert configs["block_size"] == {"4": 3}
    assert configs["num_speculative_tokens"] == {"0": 1, "2": 2}
    assert configs["kv_groups"] == {"full": 1, "full,sliding:8": 2}
    assert configs["extra.policy"] == {"priority": 2}
    assert configs["extra.async_scheduling"] == {"true": 2}
