"""Engines declare what they support; the swarm draws only that, replay refuses the rest."""

import json

import adapters_declared
from hypothesis import HealthCheck, given, settings

from schedcheck.cli.entry import main
from schedcheck.engines import registry
from schedcheck.engines.capabilities import UNDECLARED, Capabilities, config_refusals
from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.reference.engine import CAPABILITIES
from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.scenario import scenarios
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.sim.coverage import RARE_PATHS, never_reached
from schedcheck.traces import TraceRequest, write_trace

DECLARED = "adapters_declared:make_engine"


def test_the_registry_holds_no_per_engine_capability():
    tables = [
        name
        for name, value in vars(registry).items()
        if isinstance(value, dict | set | frozenset)
        and not name.startswith("__")
        and name != "BUILTIN_ENGINES"
    ]
    assert tables == []


def test_a_factory_declares_and_an_undeclared_one_gets_the_conservative_defaults():
    assert registry.capabilities(DECLARED) == adapters_declared.DECLARED
    assert registry.capabilities("reference") is CAPABILITIES
    undeclared = registry.capabilities("adapters_declared:make_undeclared")
    assert undeclared is UNDECLARED
    assert (undeclared.cache_salt, undeclared.priorities, undeclared.lookahead_tokens) == (
        False,
        False,
        False,
    )
    assert Capabilities().cache_salt and Capabilities().lookahead_tokens  # full-featured


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(scenarios(SwarmSpec(engine=DECLARED)))
def test_the_swarm_draws_only_what_the_engine_declares(scenario):
    assert scenario.config.block_size in (8, 16)
    assert all(r.cache_salt is None for r in scenario.requests)


def test_sixty_seconds_of_fuzzing_draw_no_salt_and_no_block_below_eight(tmp_path):
    """The issue's case: fuzzed 60 s, asserted from every config and request it was given."""
    adapters_declared.BUILT.clear()
    adapters_declared.ADDED.clear()
    result = run_campaign(
        CampaignOptions(
            spec=SwarmSpec(engine=DECLARED),
            seed=3,
            budget_s=60.0,
            out_dir=str(tmp_path / "out"),
            db_dir=None,
        )
    )
    assert not result.errors and not result.found, result.finding
    assert result.examples >= 100
    # every example built the engine, but those its worker judged from memory (repeats)
    assert 0 <= result.repeats < result.examples
    assert len(adapters_declared.BUILT) >= result.examples - result.repeats
    assert min(c.block_size for c in adapters_declared.BUILT) == 8
    assert {c.block_size for c in adapters_declared.BUILT} == {8, 16}
    assert adapters_declared.ADDED
    assert [r.request_id for r in adapters_declared.ADDED if r.cache_salt is not None] == []


def test_config_refusals_name_each_option():
    caps = adapters_declared.DECLARED
    config = EngineConfig(block_size=4, block_manager="paged", num_lookahead_tokens=2)
    assert config_refusals(caps, config) == [
        "--block-size 4: accepted [8, 16, 32]",
        "--block-manager paged: accepted ['hashed', 'radix']",
    ]
    no_drafts = UNDECLARED
    assert config_refusals(no_drafts, EngineConfig(num_lookahead_tokens=2)) == [
        "--num-lookahead-tokens 2: no draft tokens"
    ]
    prefix_only = Capabilities(enable_prefix_caching=(True,))
    assert config_refusals(prefix_only, EngineConfig(enable_prefix_caching=False)) == [
        "prefix caching off: the engine runs only with it on"
    ]


def test_replay_refuses_an_unsupported_flag_with_exit_2(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, [TraceRequest("r0", 0.0, 2, prompt_token_ids=tuple(range(3, 40)))])
    code = main(["replay", str(trace), "--engine", DECLARED, "--block-size", "4"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        f"schedcheck: error: engine {DECLARED} does not support --block-size 4: accepted "
        "[8, 16, 32]"
    )
    code = main(["replay", str(trace), "--engine", DECLARED, "--block-size", "8", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["finished"] == 1


def test_replay_refuses_a_salted_request_the_engine_cannot_keep_apart(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    requests = [
        TraceRequest("r0", 0.0, 2, prompt_token_ids=tuple(range(3, 40))),
        TraceRequest("r1", 0.1, 2, prompt_token_ids=tuple(range(3, 40)), cache_salt="a"),
    ]
    write_trace(trace, requests)
    code = main(["replay", str(trace), "--engine", DECLARED, "--block-size", "8"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"schedcheck: error: engine {DECLARED} cannot replay this trace: request r1: "
        "cache_salt 'a', the engine has no cache salts"
    )


def test_paths_an_engine_without_prefix_caching_cannot_reach_are_not_listed():
    assert never_reached({}, drafts=False, prefix_caching=False, vllm_options=False) == [
        "same-prefix-same-step",
        "abort-mid-chunk",
        "mixed-chunk-step",  # engine paths (SGLang's, vLLM 0.34's sessions): listed by
        "session-resumed",  # default (engine_paths)
        "session-chunk-queued",
    ]
    assert never_reached({}, spec=True, sliding=True, eos=True) == list(RARE_PATHS)
