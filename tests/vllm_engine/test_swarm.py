"""What the swarm draws for vLLM's whole engine (no vLLM needed): vLLM's scheduler option
families but async scheduling, and priorities under the priority policy; every drawn
config, once fitted, is one the engine runs (no refusal)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig
from schedcheck.engines.vllm.engine import factory
from schedcheck.fuzz.families import draws_vllm_options
from schedcheck.fuzz.swarm import SwarmSpec, draw_knobs, engine_config
from schedcheck.fuzz.swarm_vllm import VLLM_ENGINE_FAMILIES

OPTIONS = {
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
}


@settings(max_examples=60, deadline=None, database=None)
@given(st.data())
def test_vllm_engine_draws_every_family_but_async(data):
    spec = SwarmSpec(engine="vllm-engine", families=VLLM_ENGINE_FAMILIES)
    assert draws_vllm_options(spec)
    knobs = data.draw(st.composite(lambda draw: draw_knobs(draw, spec))())
    extra = dict(knobs.extra)
    assert extra["policy"] == "priority" and ASYNC_SCHEDULING_KEY not in extra
    assert set(extra) <= {"policy"} | OPTIONS
    assert knobs.num_speculative_tokens == 0 and knobs.kv_groups == "full"
    config = engine_config(spec, knobs, num_blocks=16, budget_tokens=knobs.max_num_batched_tokens)
    assert factory.refusal(config) is None, config


@settings(max_examples=60, deadline=None, database=None)
@given(st.data())
def test_without_family_vllm_engine_never_draws_what_it_refuses(data):
    spec = SwarmSpec(engine="vllm-engine")
    knobs = data.draw(st.composite(lambda draw: draw_knobs(draw, spec))())
    assert ASYNC_SCHEDULING_KEY not in dict(knobs.extra)
    config = engine_config(spec, knobs, num_blocks=16, budget_tokens=knobs.max_num_batched_tokens)
    assert factory.refusal(config) is None, config


def test_the_whole_engine_declares_priorities_read_under_the_priority_policy():
    assert factory.CAPABILITIES.priorities
    fitted = factory.fit_config(EngineConfig(extra={"policy": "priority", "chunk_align": "x"}))
    assert dict(fitted.extra) == {"policy": "priority"}
