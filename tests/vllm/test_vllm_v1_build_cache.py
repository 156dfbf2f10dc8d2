"""The vllm-v1 engine build reuses what does not change between fuzz examples (tox -e
vllm-v1): the tiny model's ModelConfig is built once per max_model_len and process
(engines/vllm/v1/build.py `_model_config_bytes`, pickled) and unpickled into each
VllmConfig; each VllmConfig is built once per config and shared by the engines of that
config (`_shared_vllm_config`). A config built from the copy must equal one built from
scratch, the cached ones must never change (not even in whole runs), and a Scheduler built
from them must schedule exactly as a fresh one (same fingerprints)."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from vllm_driver import NEEDS_VLLM_V1

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.vllm.v1.fit import fit_config_v1
from schedcheck.fuzz.scenario import scenarios
from schedcheck.fuzz.swarm import SwarmSpec

pytestmark = NEEDS_VLLM_V1

CONFIGS = tuple(map(fit_config_v1, (
    EngineConfig(block_size=16, num_gpu_blocks=64, max_num_batched_tokens=256, max_num_seqs=8,
                 max_model_len=512),
    EngineConfig(block_size=4, num_gpu_blocks=40, max_num_batched_tokens=32, max_num_seqs=3,
                 max_model_len=32, enable_chunked_prefill=False, num_speculative_tokens=2,
                 extra={"async_scheduling": "true", "policy": "priority"}),
    EngineConfig(block_size=2, num_gpu_blocks=90, max_num_batched_tokens=17, max_num_seqs=256,
                 max_model_len=64, kv_groups="full,sliding:5",
                 extra={"vllm:watermark": "0.1"}),
)))  # fmt: skip
SPEC = SwarmSpec(engine="vllm-v1", ignore=("engine-crash", "liveness"))


def _state(obj: Any) -> dict[str, Any]:
    """What an object holds (a VllmConfig's instance_id is random per instance)."""
    return {k: v for k, v in vars(obj).items() if k != "instance_id"}


def _fresh_and_cached(config: EngineConfig) -> tuple[Any, Any]:
    from schedcheck.engines.vllm.common import write_tiny_model_dir
    from schedcheck.engines.vllm.v1 import build

    n = config.max_model_len
    model_dir = write_tiny_model_dir(n)
    build._model_config_bytes.cache_clear()
    fresh = build._fresh_vllm_config(config, model_dir)
    for other in CONFIGS:  # the cached ModelConfig goes into other VllmConfigs between
        build.build_scheduler(fit_config_v1(dataclasses.replace(other, max_model_len=n)))
    return fresh, build._fresh_vllm_config(config, model_dir)


def _assert_equal_fields(fresh: Any, kept: Any) -> None:
    """Two VllmConfigs: every field equal but the instance id."""
    names = [f.name for f in dataclasses.fields(fresh)]
    assert names == [f.name for f in dataclasses.fields(kept)]
    for name in names:
        if name != "instance_id":
            assert getattr(fresh, name) == getattr(kept, name), name


def _assert_equal_configs(fresh: Any, kept: Any) -> None:
    """Every field equal but the instance id, the ModelConfig's state too."""
    _assert_equal_fields(fresh, kept)
    assert _state(fresh.model_config) == _state(kept.model_config)


@pytest.mark.parametrize("config", CONFIGS, ids=["plain", "async-spec", "sliding"])
def test_a_vllm_config_from_the_cached_model_config_equals_a_fresh_one(config):
    fresh, cached = _fresh_and_cached(config)
    assert fresh.model_config is not cached.model_config
    _assert_equal_configs(fresh, cached)


def test_engines_of_one_config_share_its_vllm_config(monkeypatch):
    from schedcheck.engines.vllm.v1 import build

    config = CONFIGS[1]
    first, again = build.build_scheduler(config), build.build_scheduler(config)
    assert first.scheduler is not again.scheduler
    assert again.scheduler.vllm_config is first.scheduler.vllm_config
    other = build.build_scheduler(dataclasses.replace(config, num_gpu_blocks=41))
    assert other.scheduler.vllm_config is not first.scheduler.vllm_config
    assert other.scheduler.vllm_config.cache_config.num_gpu_blocks == 41
    assert first.scheduler.vllm_config.cache_config.num_gpu_blocks == 40
    monkeypatch.setattr(build, "SHARE_VLLM_CONFIGS", False)
    unshared = build.build_scheduler(config)
    assert unshared.scheduler.vllm_config is not first.scheduler.vllm_config
    _assert_equal_configs(unshared.scheduler.vllm_config, first.scheduler.vllm_config)


def test_a_refused_config_is_refused_every_time():
    from schedcheck.engines.vllm.common import write_tiny_model_dir
    from schedcheck.engines.vllm.v1 import build

    refused = dataclasses.replace(CONFIGS[0], extra={"vllm:max_num_active_seqs": "9"})
    for _ in range(2):  # vLLM: max_num_active_seqs above max_num_seqs
        with pytest.raises(ValueError, match="max_num_active_seqs"):
            build.build_vllm_config(refused, write_tiny_model_dir(refused.max_model_len))


def test_the_cached_model_config_never_changes():
    from schedcheck.engines.vllm.common import write_tiny_model_dir
    from schedcheck.engines.vllm.v1 import build
    from schedcheck.sim.cost_model import profile
    from schedcheck.sim.loop import SimOptions, run
    from schedcheck.traces.schema import TraceRequest

    cached = build._model_config_bytes(write_tiny_model_dir(64), 64)
    before = pickle.loads(cached)
    trace = [
        TraceRequest(request_id=f"r{i}", arrival_time_s=0.01 * i, output_length=3,
                     prompt_token_ids=tuple(range(1, 9 + i)))
        for i in range(4)
    ]  # fmt: skip
    for config in CONFIGS:
        config = fit_config_v1(dataclasses.replace(config, max_model_len=64))
        result = run(trace, "vllm-v1", config, SimOptions(), profile("unit"))
        assert result.finished == 4
    assert build._model_config_bytes(write_tiny_model_dir(64), 64) is cached
    assert _state(pickle.loads(cached)) == _state(before)
    assert _state(before) == _state(build._model_config(write_tiny_model_dir(64), 64))


@seed(20261205)
@settings(
    max_examples=24,
    database=None,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(scenarios(SPEC))
def test_a_fuzz_example_schedules_the_same_from_a_fresh_build_and_a_cached_one(scenario):
    """The first run builds the ModelConfig from scratch, the second from the cache."""
    from schedcheck.engines.vllm.v1 import build

    build._model_config_bytes.cache_clear()
    build._shared_vllm_config.cache_clear()
    fresh = scenario.run()
    cached = scenario.run()
    assert fresh.fingerprint and cached.fingerprint == fresh.fingerprint
    assert [v.to_json() for v in cached.violations] == [v.to_json() for v in fresh.violations]
    assert (cached.steps, cached.finished) == (fresh.steps, fresh.finished)


def _assert_only_read(fresh: Any, kept: Any) -> None:
    """`kept` (a config engines ran on) equals `fresh` (one no engine ran on) in every field
    but the instance id, and in the ModelConfig's other state; it may hold more of that
    state only where vLLM memoizes a read (a cached_property, equal to the fresh one's, or
    a private `..._cache`)."""
    _assert_equal_fields(fresh, kept)
    state, kept_state = _state(fresh.model_config), _state(kept.model_config)
    assert {k: kept_state.get(k) for k in state} == state
    for name in kept_state.keys() - state.keys():  # bounded: the ModelConfig's attributes
        memo = getattr(type(kept.model_config), name, None)
        if isinstance(memo, functools.cached_property):
            assert kept_state[name] == getattr(fresh.model_config, name), name
        else:
            assert name.startswith("_") and name.endswith("_cache"), name


@seed(20261206)
@settings(
    max_examples=40,
    database=None,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(scenarios(SPEC))
def test_engines_only_read_the_vllm_config_they_share(scenario):
    """vLLM's Scheduler and the adapter only read the VllmConfig the engines of one config
    share: after two runs on it, each config the runs built equals one fresh from vLLM
    (`_assert_only_read`), and each run schedules as one on an unshared config."""
    from schedcheck.engines.vllm.v1 import build

    built: list[tuple[EngineConfig, str, Any]] = []
    fresh_vllm_config = build._fresh_vllm_config

    def recorded(config: EngineConfig, model_dir: str) -> Any:
        built.append((config, model_dir, fresh_vllm_config(config, model_dir)))
        return built[-1][2]

    build._shared_vllm_config.cache_clear()
    build._fresh_vllm_config = recorded
    try:
        shared_prints = [scenario.run().fingerprint for _ in range(2)]
    finally:
        build._fresh_vllm_config = fresh_vllm_config
    build.SHARE_VLLM_CONFIGS = False
    try:
        unshared_print = scenario.run().fingerprint
    finally:
        build.SHARE_VLLM_CONFIGS = True
    assert shared_prints == [unshared_print] * 2
    assert built, "the runs built a VllmConfig"
    for config, model_dir, kept in built:  # bounded: a config or two a run
        _assert_only_read(fresh_vllm_config(config, model_dir), kept)
