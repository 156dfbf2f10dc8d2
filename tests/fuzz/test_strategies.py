"""The strategies really produce what they promise: boundary lengths, same-prefix bursts,
fully cached prompts, prompts longer than the budget, later turns, aborts, salts; every
scenario a valid trace that fits its cache. Counted over a fixed (derandomized) sample."""

import json

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.strategies import TICK_S, TraceFeatures, boundary_lengths, traces
from schedcheck.fuzz.swarm import SwarmSpec, kv_blocks_needed
from schedcheck.traces import request_to_line
from schedcheck.traces.reader import read_trace_lines

ALL = TraceFeatures(True, True, True, True, True, True, False, True)
SAMPLE = settings(
    max_examples=200,
    database=None,
    derandomize=True,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _sample(strategy):
    out = []

    @SAMPLE
    @given(strategy)
    def collect(value):
        out.append(value)

    collect()
    return out


@pytest.fixture(scope="module")
def sample_traces():
    return _sample(traces(4, 10, ALL))


@pytest.fixture(scope="module")
def sample_scenarios():
    return _sample(scenarios(SwarmSpec()))


def _pairs(trace):
    return [(a, b) for i, a in enumerate(trace) for b in trace[i + 1 :]]


def _count(sample, predicate):
    return sum(1 for item in sample if predicate(item))


def test_boundary_lengths_sit_on_and_beside_block_boundaries_most_of_the_time():
    lengths = _sample(boundary_lengths(8, 6, 1))
    near = [n for n in lengths if n % 8 in (0, 1, 7)]
    assert len(near) >= 0.5 * len(lengths)
    assert {n % 8 for n in lengths} - {0, 1, 7}, "other offsets appear too"


def test_prompt_lengths_at_a_multiple_of_the_block_size_and_beside_it(sample_traces):
    lengths = [len(r.prompt_token_ids) for t in sample_traces for r in t]
    for offset in (0, 1, 3):
        assert sum(1 for n in lengths if n >= 4 and n % 4 == offset) >= 20


def test_same_prefix_bursts_two_requests_in_one_step_share_a_block(sample_traces):
    def burst(trace):
        return any(
            a.arrival_time_s == b.arrival_time_s
            and len(a.prompt_token_ids) >= 4
            and a.prompt_token_ids[:4] == b.prompt_token_ids[:4]
            for a, b in _pairs(trace)
        )

    assert _count(sample_traces, burst) >= 20


def test_fully_cached_prompts_equal_to_or_a_prefix_of_an_earlier_prompt(sample_traces):
    def identical(trace):
        return any(b.prompt_token_ids == a.prompt_token_ids for a, b in _pairs(trace))

    def strict_prefix(trace):
        return any(
            len(b.prompt_token_ids) < len(a.prompt_token_ids)
            and a.prompt_token_ids[: len(b.prompt_token_ids)] == b.prompt_token_ids
            for a, b in _pairs(trace)
        )

    assert _count(sample_traces, identical) >= 10
    assert _count(sample_traces, strict_prefix) >= 10


def test_prompts_longer_than_the_token_budget(sample_traces):
    assert _count(sample_traces, lambda t: any(len(r.prompt_token_ids) > 10 for r in t)) >= 50


def test_later_turns_name_an_earlier_parent_and_aborts_land_between_ticks(sample_traces):
    turns = aborts = 0
    for trace in sample_traces:
        ids = [r.request_id for r in trace]
        for r in trace:
            if r.parent_request_id:
                turns += 1
                assert ids.index(r.parent_request_id) < ids.index(r.request_id)
            if r.abort_time_s is not None:
                aborts += 1
                ticks = (r.abort_time_s - r.arrival_time_s) / TICK_S
                assert abs(ticks - int(ticks) - 0.5) < 1e-6  # half a tick off the grid
    assert turns >= 20 and aborts >= 20


def test_salts_and_constant_fills(sample_traces):
    def across_salts(trace):
        return any(
            a.cache_salt != b.cache_salt and a.prompt_token_ids[:4] == b.prompt_token_ids[:4]
            for a, b in _pairs(trace)
        )

    def repeated_block(trace):
        return any(
            len(r.prompt_token_ids) >= 8 and r.prompt_token_ids[:4] == r.prompt_token_ids[4:8]
            for r in trace
        )

    assert _count(sample_traces, across_salts) >= 10
    assert _count(sample_traces, repeated_block) >= 10


def test_every_scenario_is_a_valid_trace_that_fits_its_cache(sample_scenarios):
    rejection_paths = 0
    for scenario in sample_scenarios:
        lines = [request_to_line(r) for r in scenario.requests]
        assert tuple(read_trace_lines(lines, "<test>")) == scenario.requests  # reader's rules
        assert 1 <= scenario.num_requests <= 12
        cfg = scenario.config
        need = max(
            kv_blocks_needed(scenario.requests, cfg.block_size, False, cfg.num_lookahead_tokens)
        )
        assert cfg.num_gpu_blocks >= need - 1
        rejection_paths += cfg.num_gpu_blocks < need
        if cfg.extra["chunk_align"] == "block":
            assert cfg.max_num_batched_tokens >= cfg.block_size
        assert Scenario.from_json(json.loads(scenario.dumps())) == scenario
    assert 0 < rejection_paths < len(sample_scenarios) // 4


def test_swarm_configs_vary_every_knob(sample_scenarios):
    configs = [s.config for s in sample_scenarios]
    assert {c.block_size for c in configs} == {1, 2, 4, 8, 16}
    assert any(c.block_size > 1 and c.max_num_batched_tokens % c.block_size for c in configs)
    assert {c.block_manager for c in configs} == {"hashed", "radix"}
    assert {c.enable_prefix_caching for c in configs} == {True, False}
    assert {c.enable_chunked_prefill for c in configs} == {True, False}
    assert any(c.long_prefill_token_threshold for c in configs)
    assert {c.num_lookahead_tokens for c in configs} == {0, 1, 2, 3, 5}
    assert {c.extra["chunk_align"] for c in configs} == {"none", "block", "deterministic"}
    tight = [
        s
        for s in sample_scenarios
        if s.num_requests >= 2
        and s.config.num_gpu_blocks
        == max(
            kv_blocks_needed(s.requests, s.config.block_size, False, s.config.num_lookahead_tokens)
        )
    ]
    assert len(tight) >= 10
    assert _count(sample_scenarios, lambda s: bool(s.faults)) >= 20


def test_a_mutant_fixes_its_block_manager():
    sample = _sample(scenarios(SwarmSpec(mutant="radix-leak-chunk-kv")))
    assert {s.config.block_manager for s in sample} == {"radix"}
    assert {s.config.mutant for s in sample} == {"radix-leak-chunk-kv"}


def test_the_same_seed_draws_the_same_scenarios():
    def draw_all():
        out = []

        @settings(
            max_examples=20,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        )
        @seed(1234)
        @given(scenarios(SwarmSpec()), st.just(None))
        def collect(scenario, _):
            out.append(scenario.dumps())

        collect()
        return out

    assert draw_all() == draw_all()


@settings(max_examples=100, deadline=None)
@given(scenarios(SwarmSpec(engine="vllm-v0")))
def test_no_cache_salt_is_drawn_for_an_engine_without_one(scenario):
    assert all(r.cache_salt is None for r in scenario.requests)
