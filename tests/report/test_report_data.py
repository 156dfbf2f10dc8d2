"""The data of a finding's page, exactly, on a small bundle (no plotting library needed).

The bundle (tests/regressions/bundles/reference_hashed_stale_cache_hit, mutant
stale-cache-hit, block_size 1, 6 blocks): r0 and r1 decode; r1 is preempted at step 3, its
block 1 stays cached with r1's position 0; r0 takes block 1 at step 5 and overwrites it;
r1 comes back at step 6 with a stale cache hit on block 1 and reads r0's KV there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from schedcheck.report.block_grid import Grid
from schedcheck.report.campaign import read_campaigns
from schedcheck.report.finding import Focus, build_finding, reproduced
from schedcheck.report.replay import replay
from schedcheck.report.run_series import RunSeries
from schedcheck.report.timeline import Mark
from schedcheck.sim.cost_model import StepCostModel
from schedcheck.traces.bundle import read_bundle

ROOT = Path(__file__).resolve().parents[2]
STALE = ROOT / "tests" / "regressions" / "bundles" / "reference_hashed_stale_cache_hit"
BUNDLES = sorted((ROOT / "tests" / "regressions" / "bundles").iterdir()) + sorted(
    (ROOT / "tests" / "vllm" / "bundles").iterdir()
)


def test_focus_and_offline_replay_find_the_recorded_read():
    finding = build_finding(STALE)
    assert finding.focus == Focus(6, "r1", 1, "the block the violation names")
    assert finding.reproduced is True
    assert [
        (v.invariant, v.step, v.request_id, v.position, v.slot) for v in finding.replay_violations
    ] == [("shadow-kv.read", 6, "r1", 0, 1)]
    assert finding.request_ids == ["r0", "r1"] and finding.num_steps == 7


def test_timeline_marks_exactly():
    marks = build_finding(STALE).marks
    assert [(m.kind, m.request_id, m.step, m.last_step) for m in marks] == [
        ("prefill", "r0", 0, -1),
        ("prefill", "r1", 0, -1),
        ("decode", "r0", 1, 5),
        ("decode", "r1", 1, 2),
        ("preempted", "r1", 3, -1),
        ("finished", "r0", 5, -1),
        ("prefill", "r1", 6, -1),
        ("cache hit", "r1", 6, -1),
        ("resumed", "r1", 6, -1),
    ]
    assert marks[6] == Mark(
        "prefill",
        "r1",
        6,
        "prefill tokens [1, 4) of 4, 1 cached; block_table (4 blocks) [1, 3, 5, 4]",
    )


def test_kv_usage_per_step_exactly():
    usage = build_finding(STALE).usage
    # step, blocks_used, blocks_cached, blocks_free, hit_tokens, running, scheduled_tokens
    assert usage.rows == [
        (0, 2, 0, 4, 0, 2, 2),
        (1, 4, 0, 2, 0, 2, 2),
        (2, 6, 0, 0, 0, 2, 2),
        (3, 4, 2, 0, 0, 1, 1),  # r1 preempted: blocks 1 and 3 cached (5 went to r0)
        (4, 5, 1, 0, 0, 1, 1),
        (5, 6, 0, 0, 0, 1, 1),  # r0 takes block 1: the cached copy of r1's position 0 is gone
        (6, 4, 2, 0, 1, 1, 3),  # r1 back with a 1-token (stale) hit
    ]


def test_kv_story_of_the_block_exactly():
    story = build_finding(STALE).story
    assert story is not None and story.block == 1
    assert [(e.step, e.lane, e.text, e.ref_cnt) for e in story.events] == [
        (0, "owners", "held by r1 (ref_cnt 1): r1 takes it as logical block 0", 1),
        (0, "writes", "r1 writes position 0 into slot 1", 1),
        (0, "content", "r1 pos 0 #99dd7c75", 1),
        (0, "state", "in use", 1),
        (3, "owners", "held by nobody (ref_cnt 0): r1 lets it go", 0),
        (3, "state", "cached", 0),
        (5, "owners", "held by r0 (ref_cnt 1): r0 takes it as logical block 5", 1),
        (5, "writes", "r0 writes position 5 into slot 1", 1),
        (5, "content", "r0 pos 5 #0693135c", 1),
        (5, "state", "in use (evicted: its cached content overwritten)", 1),
        (
            6,
            "owners",
            "held by r1 (ref_cnt 1): r1 takes it as logical block 0 (cache hit); r0 lets it go",
            1,
        ),
        (
            6,
            "read",
            "r1 key 0 slot 1: key 0 holds the KV of r0 position 5 (written at step 5), expected "
            "the KV of r1 position 0",
            1,
        ),
    ]
    assert story.states == [
        (0, "in use"),
        (1, "in use"),
        (2, "in use"),
        (3, "cached"),
        (4, "cached"),
        (5, "in use"),
        (6, "in use"),
    ]


def test_block_grid_at_the_violating_step():
    assert build_finding(STALE).grid == Grid(
        step=6,
        block=1,
        request_ids=("r1",),
        first_index=0,
        blocks=((1, 3, 5, 4),),
        categories=(("cache hit", "fresh", "fresh", "fresh"),),
    )


def test_header_names_violation_engine_reproduce_and_fingerprint():
    header = dict(build_finding(STALE).header)
    assert header["violation"].startswith(
        "step 6: shadow-kv.read: request r1 position 0 slot 1 block 1: key 0 holds the KV of r0"
    )
    assert header["engine"] == "reference"
    assert "mutant stale-cache-hit" in header["config"] and "block_size 1" in header["config"]
    assert header["reproduce"] == (
        "schedcheck replay --bundle tests/regressions/bundles/reference_hashed_stale_cache_hit"
    )
    assert (
        header["fingerprint"] == "b84e6306aec85f40dfb3f589e1cf75a0d824b20dfd62a5048afa9b4fcf61bd4e"
    )


def test_every_repository_bundle_builds_and_every_shadow_read_replays():
    shadow_reads = 0
    for path in BUNDLES:
        finding = build_finding(path)
        assert finding.num_steps == read_bundle(path).summary["steps"], path.name
        if finding.reproduced is not None:
            assert finding.reproduced, path.name
            shadow_reads += 1
    assert len(BUNDLES) == 47 and shadow_reads == 8


def test_a_shadow_read_of_async_drafts_is_not_compared_offline():
    """The runner moved the chunk back after a rejected draft: the schedule alone does not
    show it, so the offline replay neither confirms nor denies the recorded read."""
    path = ROOT / "tests/vllm/bundles/0.12.0-async-spec-sliding-shadow-kv-read"
    finding = build_finding(path)
    assert finding.bundle.violations[0]["invariant"] == "shadow-kv.read"
    assert finding.reproduced is None
    assert finding.unmodelled == (
        "async scheduling with drafts: the runner's moves after a rejected draft"
    )


def test_reproduced_is_false_when_the_replay_misses_it():
    bundle = read_bundle(STALE)
    assert reproduced(bundle, []) is False


def test_run_series_rebuilds_the_clock_from_the_unit_cost_model():
    bundle = read_bundle(STALE)
    series = RunSeries(StepCostModel(**bundle.config["cost"]), {"r0": 0.0, "r1": 0.0})
    replay(bundle, [series])
    assert series.start_s == pytest.approx([i * 0.01 for i in range(7)])  # unit: 10 ms a step
    assert series.running == [2, 2, 2, 1, 1, 1, 1]
    assert series.sampled == [2, 2, 2, 1, 1, 1, 1]
    assert series.hit_ratio == [0.0] * 6 + [1 / 6]  # admissions: r0 1, r1 1, r1 again 4 (1 hit)


def test_campaign_directory_reads_bundles_and_record(tmp_path):
    shutil.copytree(STALE, tmp_path / "w0-r2-shrunk")
    shutil.copytree(BUNDLES[0], tmp_path / "w0-r2-raw")
    (tmp_path / "campaign.json").write_text(json.dumps({"examples": 7, "progress": [[1.5, 7]]}))
    [campaign] = read_campaigns(tmp_path)
    assert campaign.report == {"examples": 7, "progress": [[1.5, 7]]}
    assert [(b.path.name, b.role, b.requests) for b in campaign.bundles] == [
        ("w0-r2-raw", "raw", 3),
        ("w0-r2-shrunk", "shrunk", 2),
    ]


def test_the_vllm_finding_story_shows_the_overwrite_under_an_unchanged_hash():
    """vLLM 0.6.0 block manager v2: r3 overwrites slot 12 of r5's cached block 3 at step 6;
    the block's last slot (what its hash covers) still holds r5's KV, and r5 comes back to
    it through a partial cache hit and reads r3's KV at key 4."""
    finding = build_finding(ROOT / "tests" / "vllm" / "bundles" / "0.6.0-bm2-shadow-kv-read")
    story = finding.story
    assert story is not None
    contents = [(e.step, e.text) for e in story.events if e.lane == "content"]
    assert contents == [(3, "r5 pos 4..7 #5832f4b0"), (6, "r3 pos 4, r5 pos 5..7 #5832f4b0")]
    owners = [(e.step, e.text) for e in story.events if e.lane == "owners"]
    assert owners[-1] == (9, "held by r5 (ref_cnt 1): r5 takes it as logical block 1 (cache hit)")
    assert [(e.step, e.lane) for e in story.events][-2:] == [(9, "state"), (9, "read")]
    assert finding.step_range == (1, 9)
    assert finding.grid is not None
    assert finding.grid.blocks == ((2, 3, 1),)
    assert finding.grid.categories == (("cache hit", "cache hit", "fresh"),)


def test_a_request_rejected_before_it_ran_gets_its_own_row(tmp_path):
    from schedcheck.engines.schedule_io import output_from_json
    from schedcheck.traces.bundle import write_bundle

    r0 = {
        "request_id": "r0",
        "num_computed_tokens": 0,
        "num_scheduled_tokens": 1,
        "num_tokens": 1,
        "num_prompt_tokens": 1,
        "token_ids": [1000],
        "block_table": [0],
    }
    rejected = {
        "step": 1,
        "scheduled": [],
        "rejected_req_ids": ["r1"],
        "rejected_reasons": ["too long"],
    }
    line = (
        '{"request_id": "%s", "arrival_time_s": 0.0, "output_length": 1, "prompt_token_ids": [%d]}'
    )
    write_bundle(
        tmp_path / "b",
        trace_lines=[line % ("r0", 1000), line % ("r1", 7)],
        config=json.loads((STALE / "config.json").read_text()),
        schedule=[output_from_json({"step": 0, "scheduled": [r0]}), output_from_json(rejected)],
        outputs={"r0": [18496], "r1": []},
        violations=[],
        summary={"steps": 2, "fingerprint": "-"},
        command="-",
    )  # fmt: skip
    finding = build_finding(tmp_path / "b")
    assert finding.request_ids == ["r0", "r1"]
    assert [(m.kind, m.request_id, m.step, m.text) for m in finding.marks] == [
        ("prefill", "r0", 0, "prefill tokens [0, 1) of 1; block_table (1 blocks) [0]"),
        ("aborted", "r1", 1, "rejected: too long"),
    ]


def test_a_rerun_bundle_carries_the_engines_view_of_the_block(tmp_path):
    """save_bundle of a violating run records the engine's block events (kv_events.jsonl);
    the story shows them: after step 5 the engine has block 1 cached under r0's content's
    hash, yet r1 takes it at step 6 as a hit on its own prefix (the stale count)."""
    from schedcheck.sim.bundles import rerun_bundle, save_bundle

    result, _ = rerun_bundle(STALE)
    save_bundle(tmp_path / "b", result)
    story = build_finding(tmp_path / "b").story
    assert story is not None
    assert [(e.step, e.text) for e in story.events if e.lane == "engine"] == [
        (0, "engine after step 0: ref_cnt 1; in the prefix cache as #e1083da6"),
        (3, "engine after step 3: ref_cnt 0; in the prefix cache as #e1083da6"),
        (5, "engine after step 5: ref_cnt 0; in the prefix cache as #3586b326"),
    ]
    assert build_finding(STALE).story.engine == {}  # an older bundle: no kv_events.jsonl


def test_a_clean_run_bundle_has_no_kv_events(tmp_path):
    from schedcheck.sim.bundles import save_bundle
    from schedcheck.sim.loop import SimOptions, run
    from schedcheck.traces import read_trace

    trace = list(read_trace(STALE / "trace.jsonl"))
    result = run(trace, options=SimOptions(record_schedule=True))
    assert not result.violations
    save_bundle(tmp_path / "clean", result)
    assert not (tmp_path / "clean" / "kv_events.jsonl").exists()
