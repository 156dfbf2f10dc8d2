"""Malformed engine output is a named protocol.* violation with a bundle, never a crash."""

import json
from pathlib import Path

import numpy as np
import pytest

from schedcheck.cli.commands.fuzz import IGNORABLE
from schedcheck.cli.entry import main
from schedcheck.engines.protocol import (
    EngineConfig,
    FinishedRequest,
    ScheduledRequest,
    SchedulerOutput,
)
from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.invariants.protocol import ProtocolChecker
from schedcheck.sim.bundles import rerun_bundle, same_violations
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces import TraceRequest, write_trace

SMALL = ["--block-size", "4", "--num-gpu-blocks", "64", "--max-num-batched-tokens", "8"]
PARENT = TraceRequest("r0", 0.0, 3, prompt_token_ids=tuple(range(100, 120)))
LATER_TURN = TraceRequest("r1", 0.0, 2, prompt_token_ids=(5, 6, 7), parent_request_id="r0")

CASES = [
    (
        "miscounting",
        "step 0: protocol.chunk-length: request r0 position 0: token_ids holds 7 ids, "
        "num_scheduled_tokens is 8 (num_computed_tokens 0)",
    ),
    (
        "unknown_id",
        "step 0: protocol.unknown-request: request ghost: scheduled names a request never added",
    ),
    (
        "negative_count",
        "step 0: protocol.counts: request r0: num_computed_tokens is -1, must be an integer >= 0",
    ),
    (
        "swallows_finish",
        "step 5: protocol.lost-request: request r0: has_unfinished_requests() is False, but "
        "the request was never reported finished, aborted or rejected; later turn(s) r1 "
        "wait for it",
    ),
]


@pytest.mark.parametrize(("adapter", "headline"), CASES)
def test_replay_names_the_mistake_and_its_bundle_reproduces(tmp_path, capsys, adapter, headline):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, [PARENT, LATER_TURN])
    out = tmp_path / "bundle"
    engine = f"adapters_broken:make_{adapter}"
    args = ["replay", str(trace), "--engine", engine, *SMALL, "--cost-profile", "unit"]
    code = main([*args, "--out", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [v["invariant"] for v in report["violations"]] == [headline.split(": ")[1]]
    assert f"step {report['violations'][0]['step']}: " + headline.split(": ", 1)[1] == headline
    assert (out / "violations.json").is_file()
    code = main(["replay", "--bundle", str(out), "--json"])
    again = json.loads(capsys.readouterr().out)
    assert (code, again["reproduced"]) == (1, True)


def test_the_headline_is_exact():
    for adapter, headline in CASES:
        result = run(
            [PARENT, LATER_TURN],
            f"adapters_broken:make_{adapter}",
            _config(),
            SimOptions(),
        )
        assert [v.headline() for v in result.violations] == [headline]
        assert result.exit_code == 1 and not result.stuck


def test_a_fuzz_campaign_reports_the_protocol_violation_with_a_bundle(tmp_path):
    result = run_campaign(
        CampaignOptions(
            spec=SwarmSpec(engine="adapters_broken:make_miscounting"),
            seed=1,
            budget_s=60.0,
            out_dir=str(tmp_path / "out"),
            db_dir=None,
            shrink_runs_max=20,
        )
    )
    assert result.found and result.finding["kind"] == "protocol.chunk-length"
    assert result.finding["bundle"] is not None
    bundle = result.finding["bundle"]
    violations = json.loads((Path(bundle) / "violations.json").read_text())
    assert violations[0]["invariant"] == "protocol.chunk-length"
    rerun, recorded = rerun_bundle(bundle)
    assert same_violations(rerun, recorded.violations)


def _config():
    return EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=8)


def _request(rid="a", table=(0, 1), **kw):
    fields = dict(
        request_id=rid,
        num_computed_tokens=0,
        num_scheduled_tokens=4,
        num_tokens=4,
        num_prompt_tokens=4,
        token_ids=np.arange(4, dtype=np.int64),
        block_table=table,
    )
    fields.update(kw)
    return ScheduledRequest(**fields)


def _names(violations):
    return [(v.invariant, v.request_id) for v in violations]


def test_each_property_of_an_output():
    checker = ProtocolChecker(num_gpu_blocks=4)
    live, retired = {"a", "b"}, {"gone"}
    ok = SchedulerOutput(0, (_request("a"), _request("b", table=(2,))))
    assert checker.check_output(ok, live, retired) == []
    bad = SchedulerOutput(
        1,
        (_request("a"), _request("a"), _request("gone"), _request("b", table=(2, 7))),
        preempted_req_ids=("nobody",),
        finished_req_ids=("b",),
        rejected_req_ids=("gone",),
        dropped_req_ids=("nobody", "a"),
    )
    assert _names(checker.check_output(bad, live, retired)) == [
        ("protocol.unknown-request", "nobody"),
        ("protocol.rejected-reasons", ""),
        ("protocol.dropped", "a"),
        ("protocol.duplicate", "a"),
        ("protocol.not-live", "gone"),
        ("protocol.scheduled-and-finished", "gone"),
        ("protocol.scheduled-and-finished", "b"),
        ("protocol.block-id", "b"),
    ]


def test_block_ids_are_checked_past_what_was_checked_and_whole_after_a_preemption():
    checker = ProtocolChecker(num_gpu_blocks=4)
    first = checker.check_output(SchedulerOutput(0, (_request(table=(0, 9)),)), {"a"}, ())
    assert [v.message for v in first] == ["block_table[1] is 9, outside the 4 blocks (0..3)"]
    grown = checker.check_output(SchedulerOutput(1, (_request(table=(0, 9, 3)),)), {"a"}, ())
    assert grown == []  # block 9 was reported; only block 3 is new
    preempted = SchedulerOutput(2, (), preempted_req_ids=("a",))
    assert checker.check_output(preempted, {"a"}, ()) == []
    again = checker.check_output(SchedulerOutput(3, (_request(table=(-1,)),)), {"a"}, ())
    assert [(v.invariant, v.block) for v in again] == [("protocol.block-id", -1)]


def test_token_ids_that_are_not_an_integer_array_and_odd_counts():
    checker = ProtocolChecker(num_gpu_blocks=4)
    req = _request(token_ids=[1, 2, 3, 4], num_cached_tokens=-2, num_tokens=3)
    out = checker.check_output(SchedulerOutput(0, (req,)), {"a"}, ())
    assert [v.message for v in out] == [
        "num_cached_tokens is -2, must be an integer >= 0",
        "num_tokens is 3, less than num_prompt_tokens 4",
        "token_ids is list, must be a 1-D integer array",
    ]


def test_finished_lists_name_requests_the_engine_was_given_once():
    checker = ProtocolChecker(num_gpu_blocks=4)
    finished = [
        FinishedRequest("a", (1,), "length"),
        FinishedRequest("a", (1,), "length"),
        FinishedRequest("x", (), "length"),
    ]
    assert _names(checker.check_finished(5, finished, {"a"}, ())) == [
        ("protocol.duplicate", "a"),
        ("protocol.unknown-request", "x"),
    ]


def test_protocol_violations_and_harness_crashes_can_be_ignored_past():
    for name in ("protocol.chunk-length", "protocol.lost-request", "harness-crash"):
        assert IGNORABLE.fullmatch(name)
    assert not IGNORABLE.fullmatch("protocol")
