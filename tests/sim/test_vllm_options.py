"""vLLM v1's scheduler options without vLLM: the swarm's families, fit_config_v1, the rare
paths' never_reached rule, the loop's pipeline-depth refusal and the replay flags' exit 2."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcheck.engines.protocol import EngineConfig, is_async_scheduling
from schedcheck.engines.registry import fit_config
from schedcheck.fuzz.swarm import SwarmSpec, draw_knobs
from schedcheck.fuzz.swarm_vllm import VLLM_FAMILIES
from schedcheck.sim.coverage import FAULT_PATHS, never_reached
from schedcheck.sim.loop import pipeline_depth


def test_fit_caps_max_num_active_seqs_at_max_num_seqs():
    config = EngineConfig(
        max_num_batched_tokens=4, max_num_seqs=6, extra={"vllm:max_num_active_seqs": "5"}
    )
    fitted = fit_config("vllm-v1", config)
    assert fitted.max_num_seqs == 4
    assert dict(fitted.extra) == {"vllm:max_num_active_seqs": "4"}


def test_fit_raises_max_num_scheduled_tokens_to_max_model_len_without_chunked_prefill():
    config = EngineConfig(
        max_num_batched_tokens=8,
        enable_chunked_prefill=False,
        extra={"vllm:max_num_scheduled_tokens": "1", "policy": "priority"},
    )
    fitted = fit_config("vllm-v1", config)
    assert fitted.max_model_len == 8
    assert dict(fitted.extra) == {"vllm:max_num_scheduled_tokens": "8", "policy": "priority"}


def test_fit_leaves_max_num_scheduled_tokens_alone_with_chunked_prefill():
    config = EngineConfig(
        max_num_batched_tokens=8, max_num_seqs=4, extra={"vllm:max_num_scheduled_tokens": "1"}
    )
    assert fit_config("vllm-v1", config) == config


@settings(max_examples=50, deadline=None, database=None)
@given(st.data())
def test_a_named_family_is_drawn_in_every_example(data):
    spec = SwarmSpec(engine="vllm-v1", families=("priority", "async"))
    extra = dict(data.draw(st.composite(lambda draw: draw_knobs(draw, spec))()).extra)
    assert extra["policy"] == "priority"
    assert extra["async_scheduling"] == "true"
    assert set(extra) <= {
        "policy",
        "async_scheduling",
        "vllm:max_num_scheduled_tokens",
        "vllm:long_prefill_token_threshold_adaptive",
        "vllm:prefill_schedule_interval",
        "vllm:watermark",
        "vllm:scheduler_reserve_full_isl",
        "vllm:max_num_active_seqs",
        "vllm:cache_aware_admission_window",
        "vllm:cache_aware_admission_threshold",
        "vllm:max_num_queued_reqs",
        "vllm:max_num_queued_tokens",
        "streaming_input",
    }


@settings(max_examples=50, deadline=None, database=None)
@given(st.data())
def test_the_admission_family_draws_cache_aware_admission_window_and_threshold_together(data):
    spec = SwarmSpec(engine="vllm-v1", families=("admission",))
    extra = dict(data.draw(st.composite(lambda draw: draw_knobs(draw, spec))()).extra)
    window = extra.get("vllm:cache_aware_admission_window")
    threshold = extra.get("vllm:cache_aware_admission_threshold")
    assert (window is None) == (threshold is None)
    assert window in (None, "1", "2", "4", "8")
    assert threshold in (None, "0.0", "0.5", "0.9")


@settings(max_examples=30, deadline=None, database=None)
@given(st.data())
def test_the_reference_engine_draws_no_vllm_option_and_async_only_by_family(data):
    spec = SwarmSpec(engine="reference", families=VLLM_FAMILIES)
    knobs = data.draw(st.composite(lambda draw: draw_knobs(draw, spec))())
    assert set(dict(knobs.extra)) == {"chunk_align", "policy", "async_scheduling"}
    assert (dict(knobs.extra)["async_scheduling"], knobs.num_speculative_tokens) == ("true", 0)
    spec = SwarmSpec(engine="reference")
    extra = dict(data.draw(st.composite(lambda draw: draw_knobs(draw, spec))()).extra)
    assert set(extra) == {"chunk_align", "policy"}


def test_never_reached_lists_the_vllm_option_paths_only_where_they_are_drawn():
    counts = {"preempt-scheduled-same-step": 3}
    missed = never_reached(counts, drafts=False)
    assert [p for p in missed if p in ("async-output-placeholder", "queue-full-rejection")] == [
        "async-output-placeholder",
        "queue-full-rejection",
    ]
    assert "preempt-scheduled-same-step" not in missed
    without = never_reached({}, drafts=False, vllm_options=False)
    assert not {"preempt-scheduled-same-step", "async-output-placeholder"} & set(without)


def test_the_pipeline_depth_is_2_only_for_an_engine_that_models_async_scheduling():
    sync = EngineConfig()
    asynchronous = dataclasses.replace(sync, extra={"async_scheduling": "true"})
    assert is_async_scheduling(asynchronous) and not is_async_scheduling(sync)

    class Modelled:
        supports_async_scheduling = True

    assert pipeline_depth("x", object(), sync) == 1
    assert pipeline_depth("x", Modelled(), asynchronous) == 2
    with pytest.raises(ValueError, match="engine 'reference' does not model async scheduling"):
        pipeline_depth("reference", object(), asynchronous)


def _replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", "replay", "--max-requests", "2", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_replay_runs_the_reference_engine_with_async_scheduling():
    done = _replay("--async-scheduling", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["finished"], result["coverage"]["async-output-placeholder"] > 0) == (2, True)


def test_replay_refuses_drafts_with_async_scheduling_on_the_reference_engine():
    done = _replay("--async-scheduling", "--num-speculative-tokens", "2")
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "schedcheck: error: num_speculative_tokens=2 with async scheduling: the reference "
        "engine does not schedule drafts optimistically (use --engine vllm-v1)",
    )


def test_replay_refuses_a_vllm_option_on_another_engine():
    done = _replay("--vllm-option", "watermark=0.1")
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "schedcheck: error: --vllm-option is for --engine vllm-v1 or vllm-engine, not 'reference'",
    )


def test_replay_runs_the_reference_engine_with_the_priority_policy():
    done = _replay("--policy", "priority", "--json")
    assert done.returncode == 0, done.stderr


def test_a_release_path_is_listed_only_where_the_engine_counts_it():
    assert "cache-aware-reorder" in never_reached({}, engine_paths=("cache-aware-reorder",))
    assert "cache-aware-reorder" not in never_reached({}, engine_paths=())
    assert "cache-aware-reorder" not in never_reached({"cache-aware-reorder": 1})


def test_a_priority_campaign_does_not_list_cache_aware_reorder_as_unreached():
    """vLLM applies the cache-aware admission window under FCFS only: every example of a
    --family priority campaign is a priority one, so the path cannot be reached there."""
    from schedcheck.fuzz.campaign import CampaignOptions, CampaignResult

    def missed(families: tuple[str, ...]) -> list[str]:
        result = CampaignResult(CampaignOptions(SwarmSpec(engine="vllm-v1", families=families)))
        result.engine_paths = ("cache-aware-reorder", "preempt-scheduled-same-step")
        return result.never_reached()

    assert "cache-aware-reorder" in missed(("admission",))
    assert "cache-aware-reorder" not in missed(("priority",))


def test_the_fault_paths_are_unreached_only_where_faults_and_their_release_can_reach_them():
    """vLLM's fault points count `reset-with-step-in-flight` (0.12.0 on: a step in flight
    needs async scheduling, drawn in half the examples if not always on) and
    `engine-paused` (0.25.0 on); a campaign without faults drawn cannot reach them."""
    from schedcheck.fuzz.campaign import CampaignOptions, CampaignResult

    def missed(families: tuple[str, ...], faults: bool = True, paths=FAULT_PATHS) -> list[str]:
        spec = SwarmSpec(engine="vllm-v1", families=families, faults=faults)
        result = CampaignResult(CampaignOptions(spec))
        result.engine_paths = paths
        return [p for p in result.never_reached() if p in FAULT_PATHS]

    assert missed(("async",)) == ["reset-with-step-in-flight", "engine-paused"]
    assert missed(("async",), paths=("reset-with-step-in-flight",)) == [
        "reset-with-step-in-flight"  # a release without pauses (0.12.0)
    ]
    assert missed(("async",), faults=False) == []
    assert missed(("priority",)) == ["reset-with-step-in-flight", "engine-paused"]
    assert "engine-paused" not in never_reached({"engine-paused": 2}, engine_paths=FAULT_PATHS)


def test_vllm_engine_refuses_a_family_it_cannot_draw_and_never_lists_the_placeholder():
    """vLLM's whole engine on a CPU draws no async scheduling, drafts or sliding window:
    --family async is bad input (named), and async-output-placeholder is not unreached."""
    from schedcheck.fuzz.campaign import CampaignOptions, CampaignResult, check_target
    from schedcheck.fuzz.families import undrawable_families

    spec = SwarmSpec(engine="vllm-engine", families=("priority", "async", "sliding-window"))
    assert undrawable_families(spec) == ("async", "sliding-window")
    assert undrawable_families(SwarmSpec(engine="vllm-v1", families=("async",))) == ()
    with pytest.raises(ValueError, match=r"cannot draw --family async, sliding-window"):
        check_target(spec)
    result = CampaignResult(CampaignOptions(SwarmSpec(engine="vllm-engine")))
    assert "async-output-placeholder" not in result.never_reached()
    result = CampaignResult(CampaignOptions(SwarmSpec(engine="vllm-v1")))
    assert "async-output-placeholder" in result.never_reached()
