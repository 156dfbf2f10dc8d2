"""Generators: deterministic for a seed, and the statistics each one promises."""

from __future__ import annotations

import io
import math
from dataclasses import replace

import numpy as np
import pytest

from schedcheck.traces import request_to_line, write_trace
from schedcheck.traces.generators import (
    KINDS,
    GenOptions,
    LengthSpec,
    closed_loop,
    gamma_arrival_times_s,
    generate,
    multi_turn,
    poisson_arrival_times_s,
    shared_prefix,
)
from schedcheck.traces.reader import read_trace_lines
from schedcheck.traces.sessions import PredecessorTracker
from schedcheck.traces.stats import compute_stats

SMALL = GenOptions(
    num_requests=40,
    input_lengths=LengthSpec.uniform(1, 40),
    output_lengths=LengthSpec.uniform(1, 8),
    prefix_lengths=LengthSpec.fixed(20),
    first_lengths=LengthSpec.uniform(1, 40),
    num_groups=3,
    group_size=4,
    num_users=3,
    requests_per_user=4,
    think_min_s=0.5,
    think_max_s=2.0,
    num_sessions=3,
    turns=4,
)


def lines(kind: str, seed: int, options: GenOptions = SMALL) -> list[str]:
    return [request_to_line(r) for r in generate(kind, seed, options)]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_same_seed_same_trace_other_seed_other_trace(kind: str) -> None:
    assert lines(kind, 7) == lines(kind, 7)
    assert lines(kind, 7) != lines(kind, 8)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_writes_a_valid_trace(kind: str) -> None:
    buffer = io.StringIO()
    count = write_trace(buffer, generate(kind, 3, SMALL))
    assert len(list(read_trace_lines(buffer.getvalue().splitlines(), kind))) == count
    expected = {
        "poisson": 40,
        "gamma": 40,
        "closed-loop": 12,
        "shared-prefix": 12,
        "multi-turn": 12,
    }
    assert count == expected[kind]


def test_poisson_mean_gap_and_cv() -> None:
    times_s = poisson_arrival_times_s(np.random.default_rng(0), 20_001, rate_per_s=4.0)
    gaps_s = np.diff(times_s)
    assert times_s[0] == 0.0 and gaps_s.size == 20_000
    assert abs(gaps_s.mean() - 0.25) < 0.25 * 0.02
    assert abs(gaps_s.std() / gaps_s.mean() - 1.0) < 0.03


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_mean_one_over_rate_and_cv_one_over_sqrt_k(burstiness: float) -> None:
    times_s = gamma_arrival_times_s(np.random.default_rng(1), 20_001, 10.0, burstiness)
    gaps_s = np.diff(times_s)
    assert abs(gaps_s.mean() - 0.1) < 0.1 * 0.03
    assert abs(gaps_s.std() / gaps_s.mean() - 1 / math.sqrt(burstiness)) < 0.05 / math.sqrt(
        burstiness
    )


def test_infinite_rate_sends_all_at_once() -> None:
    assert gamma_arrival_times_s(np.random.default_rng(0), 5, math.inf).tolist() == [0.0] * 5


def test_boundary_lengths_sit_on_block_boundaries() -> None:
    spec = LengthSpec.boundary(10, 70, block_size=16)
    lengths = spec.sample(np.random.default_rng(0), 2_000)
    values = set(lengths.tolist())
    assert values == {15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65}
    assert all(v % 16 in (15, 0, 1) for v in values)


def test_boundary_range_edges() -> None:
    assert set(LengthSpec.boundary(16, 33, 16).sample(np.random.default_rng(0), 500).tolist()) == {
        16,
        17,
        31,
        32,
        33,
    }
    assert LengthSpec.boundary_possible(1, 1, 16) is False
    assert LengthSpec.boundary_possible(15, 15, 16) is True
    assert LengthSpec.boundary_possible(18, 30, 16) is False


def test_shared_prefix_groups_share_exactly_their_system_prompt() -> None:
    requests = list(
        shared_prefix(
            np.random.default_rng(5),
            num_groups=4,
            group_size=5,
            prefix_lengths=LengthSpec.fixed(33),
            suffix_lengths=LengthSpec.uniform(1, 10),
            output_lengths=LengthSpec.fixed(2),
            rate_per_s=100.0,
        )
    )
    assert len(requests) == 20
    by_group: dict[str, list[tuple[int, ...]]] = {}
    for request in requests:
        assert request.prompt_token_ids is not None
        by_group.setdefault(request.request_id.split("-")[0], []).append(request.prompt_token_ids)
    assert sorted(by_group) == ["g0", "g1", "g2", "g3"]
    systems = set()
    for prompts in by_group.values():
        assert len(prompts) == 5
        assert len({p[:33] for p in prompts}) == 1  # the whole system prompt is shared
        assert len({p[33:] for p in prompts}) == 5  # suffixes differ
        systems.add(prompts[0][:33])
    assert len(systems) == 4
    # 33 tokens = 2 full blocks of 16 shared by the 4 later members of each group
    stats = compute_stats(requests, token_block_size=16)
    assert stats.prefix_hit_tokens == 4 * 4 * 32


def test_shared_prefix_suffix_zero_makes_identical_prompts() -> None:
    requests = list(
        shared_prefix(
            np.random.default_rng(0),
            num_groups=1,
            group_size=3,
            prefix_lengths=LengthSpec.fixed(48),
            suffix_lengths=LengthSpec.fixed(0),
            output_lengths=LengthSpec.fixed(1),
            rate_per_s=1.0,
        )
    )
    assert len({r.prompt_token_ids for r in requests}) == 1
    assert compute_stats(requests).prefix_hit_tokens == 2 * 48  # fully cached prompts


def test_closed_loop_users_are_sessions_with_think_time() -> None:
    requests = list(
        closed_loop(
            np.random.default_rng(2),
            num_users=3,
            requests_per_user=4,
            spawn_rate_per_s=2.0,
            think_min_s=1.0,
            think_max_s=3.0,
            input_lengths=LengthSpec.fixed(8),
            output_lengths=LengthSpec.fixed(4),
        )
    )
    assert [r.request_id for r in requests[:5]] == ["u0-0", "u0-1", "u0-2", "u0-3", "u1-0"]
    assert [r.arrival_time_s for r in requests] == [0.0] * 4 + [0.5] * 4 + [1.0] * 4
    assert all(r.parent_request_id is None for r in requests)  # no shared history
    tracker = PredecessorTracker()
    predecessors = [tracker.predecessor_id(r) for r in requests]
    assert predecessors[:5] == [None, "u0-0", "u0-1", "u0-2", None]
    for request in requests:
        first = request.request_id.endswith("-0")
        assert request.think_time_s == 0.0 if first else 1.0 <= request.think_time_s <= 3.0
    assert len({r.prompt_token_ids for r in requests}) == 12


def test_multi_turn_turns_chain_to_their_parents() -> None:
    requests = list(
        multi_turn(
            np.random.default_rng(4),
            num_sessions=2,
            turns=3,
            rate_per_s=1.0,
            think_min_s=0.5,
            think_max_s=0.5,
            first_lengths=LengthSpec.fixed(100),
            followup_lengths=LengthSpec.fixed(10),
            output_lengths=LengthSpec.fixed(5),
        )
    )
    assert [(r.request_id, r.parent_request_id) for r in requests] == [
        ("s0-0", None),
        ("s0-1", "s0-0"),
        ("s0-2", "s0-1"),
        ("s1-0", None),
        ("s1-1", "s1-0"),
        ("s1-2", "s1-1"),
    ]
    assert [r.think_time_s for r in requests] == [0.0, 0.5, 0.5] * 2
    assert requests[0].arrival_time_s == 0.0 and requests[3].arrival_time_s > 0.0
    assert len({r.arrival_time_s for r in requests[3:]}) == 1
    stats = compute_stats(requests)
    # full prompts 100, 115, 130 per session; history 105 and 120 counts as hits
    assert stats.input_length.max == 130 and stats.prompt_tokens == 2 * 345
    assert stats.prefix_hit_tokens == 2 * (105 + 120)


def test_options_are_read_per_kind() -> None:
    longer = replace(SMALL, num_requests=41)
    assert len(lines("gamma", 0, longer)) == 41
    assert lines("closed-loop", 0, longer) == lines("closed-loop", 0, SMALL)
