"""What each engine's campaign draws (fuzz/families.py): the --family names it accepts,
whether async scheduling is drawn, and SGLang's overlap scheduling drawn as its option."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcheck.fuzz.campaign import CampaignOptions, CampaignResult, check_target
from schedcheck.fuzz.families import (
    drawable_families,
    draws_async,
    draws_eos,
    draws_max_model_len,
    undrawable_families,
)
from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.swarm import SwarmSpec, draw_knobs


def test_each_engine_names_the_families_it_draws():
    assert drawable_families(SwarmSpec(engine="reference")) == (
        "async",
        "spec-decode",
        "eos",
        "max-model-len",
    )
    assert drawable_families(SwarmSpec(engine="sglang")) == (
        "async",
        "streaming",
        "eos",
        "max-model-len",
    )
    assert drawable_families(SwarmSpec(engine="vllm-engine")) == (
        "priority",
        "budget",
        "admission",
        "queue",
        "max-model-len",
    )
    assert drawable_families(SwarmSpec(engine="vllm-v1")) == (
        "priority",
        "async",
        "budget",
        "admission",
        "queue",
        "streaming",
        "spec-decode",
        "sliding-window",
        "eos",
        "max-model-len",
    )


def test_sglang_refuses_a_vllm_family_and_accepts_async():
    spec = SwarmSpec(engine="sglang", families=("priority", "async"))
    assert undrawable_families(spec) == ("priority",)
    with pytest.raises(
        ValueError,
        match=r"cannot draw --family priority \(it draws async, streaming, eos, max-model-len\)",
    ):
        check_target(spec)


@pytest.mark.parametrize(
    "engine, families, drawn",
    [
        ("reference", (), False),
        ("reference", ("async",), True),
        ("sglang", (), True),  # overlap on in half the examples
        ("vllm-engine", (), False),
        ("vllm-v1", (), True),
    ],
)
def test_async_scheduling_is_drawn_where_the_engine_draws_it(engine, families, drawn):
    spec = SwarmSpec(engine=engine, families=families)
    assert draws_async(spec) is drawn
    missed = CampaignResult(CampaignOptions(spec)).never_reached()
    assert ("async-output-placeholder" in missed) is drawn  # nothing ran: 0 if reachable


def _sglang_values(families: tuple[str, ...], key: str = "async_scheduling") -> set[str]:
    seen: set[str] = set()

    @settings(max_examples=40, derandomize=True, database=None)
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        knobs = draw_knobs(data.draw, SwarmSpec(engine="sglang", families=families))
        seen.add(dict(knobs.extra)[key])

    draw()
    return seen


def test_sglang_draws_overlap_on_and_off_and_always_on_under_family_async():
    assert _sglang_values(()) == {"false", "true"}
    assert _sglang_values(("async",)) == {"true"}


def test_sglang_draws_mixed_chunks_on_and_off_off_first():
    """--enable-mixed-chunk, drawn as overlap is (off first: findings shrink to the
    normal loop), with or without --family async."""
    assert _sglang_values((), "enable_mixed_chunk") == {"false", "true"}
    assert _sglang_values(("async",), "enable_mixed_chunk") == {"false", "true"}
    caps = SwarmSpec(engine="sglang").capabilities
    assert dict(caps.extra_options)["enable_mixed_chunk"] == ("false", "true")


def test_sglang_lists_a_retraction_with_a_token_in_flight_where_its_adapter_counts_it():
    """retract-with-token-in-flight: SGLang's adapter counts it (rare_path_counts); a
    campaign that draws overlap scheduling lists it while it is 0, one that cannot (the
    reference without --family async) never does."""
    result = CampaignResult(CampaignOptions(SwarmSpec(engine="sglang")))
    result.engine_paths = ("retract-with-token-in-flight",)
    assert "retract-with-token-in-flight" in result.never_reached()
    reference = CampaignResult(CampaignOptions(SwarmSpec(engine="reference")))
    reference.engine_paths = ("retract-with-token-in-flight",)
    assert "retract-with-token-in-flight" not in reference.never_reached()


def test_sglang_lists_a_mixed_step_while_none_ran_where_its_adapter_counts_it():
    """mixed-chunk-step (sim/coverage.py ENGINE_PATHS): listed while 0 by a campaign whose
    engine counts it (SGLang's rare_path_counts), not once reached, never elsewhere."""
    result = CampaignResult(CampaignOptions(SwarmSpec(engine="sglang")))
    result.engine_paths = ("mixed-chunk-step", "retract-with-token-in-flight")
    assert "mixed-chunk-step" in result.never_reached()
    result.coverage["mixed-chunk-step"] = 3
    assert "mixed-chunk-step" not in result.never_reached()
    reference = CampaignResult(CampaignOptions(SwarmSpec(engine="reference")))
    assert "mixed-chunk-step" not in reference.never_reached()


def _eos_drawn(engine: str, families: tuple[str, ...]) -> set[tuple[int, int | None]]:
    """The (vocab_size, eos_token_id) pairs 30 examples of the spec draw."""
    seen: set[tuple[int, int | None]] = set()

    @settings(max_examples=30, derandomize=True, database=None, deadline=None)
    @given(scenarios(SwarmSpec(engine=engine, families=families)))
    def draw(scenario: Scenario) -> None:
        seen.add((scenario.vocab_size, scenario.eos_token_id))
        again = Scenario.from_json_text(scenario.dumps())  # carried with the scenario
        assert (again.vocab_size, again.eos_token_id) == (
            scenario.vocab_size,
            scenario.eos_token_id,
        )
        assert ("eos_token_id" in scenario.to_json()) is (scenario.eos_token_id is not None)

    draw()
    return seen


def test_the_eos_is_drawn_under_its_family_and_never_without_it_for_the_reference():
    assert not draws_eos(SwarmSpec(engine="reference"))
    assert _eos_drawn("reference", ()) == {(32_000, None)}  # its stream unchanged
    drawn = _eos_drawn("reference", ("eos",))
    assert all(eos is not None and 3 <= eos < vocab for vocab, eos in drawn)
    assert {vocab for vocab, _ in drawn} >= {3 + 8, 3 + 2}
    assert draws_eos(SwarmSpec(engine="sglang")) and draws_eos(SwarmSpec(engine="vllm-v1"))
    assert not draws_eos(SwarmSpec(engine="vllm-engine", families=("eos",)))  # not declared
    missed = CampaignResult(CampaignOptions(SwarmSpec(engine="reference"))).never_reached()
    assert "eos-stop" not in missed
    missed = CampaignResult(CampaignOptions(SwarmSpec(engine="reference", families=("eos",))))
    assert "eos-stop" in missed.never_reached()


def test_max_model_len_is_drawn_at_a_requests_boundaries_under_its_family():
    seen: list[tuple[int, tuple[int, ...]]] = []

    @settings(max_examples=30, derandomize=True, database=None, deadline=None)
    @given(scenarios(SwarmSpec(engine="reference", families=("max-model-len",))))
    def draw(scenario: Scenario) -> None:
        ends = tuple(r.num_own_prompt_tokens + r.output_length for r in scenario.requests)
        seen.append((scenario.config.max_model_len, ends))

    draw()
    assert all(any(mml >= 2 and -end <= mml - end <= 1 for end in ends) for mml, ends in seen)
    assert any(mml < max(ends) for mml, ends in seen)  # a request capped or refused
    assert not draws_max_model_len(SwarmSpec(engine="reference"))
    assert draws_max_model_len(SwarmSpec(engine="vllm-v1"))
