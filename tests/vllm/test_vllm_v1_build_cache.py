"""The vllm-v1 engine build reuses what does not change between fuzz examples (tox -e
vllm-v1): the tiny model's ModelConfig is built once per max_model_len and process
(engines/vllm/v1/build.py `_model_config_bytes`, pickled) and unpickled into each
VllmConfig. A config built from the copy must equal one built from scratch, the cached one
must never change, and a Scheduler built from it must schedule exactly as a fresh one (same
fingerprints)."""

from __future__ import annotations

import dataclasses
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
    fresh = build.build_vllm_config(config, model_dir)
    for other in CONFIGS:  # the cached ModelConfig goes into other VllmConfigs between
        build.build_scheduler(fit_config_v1(dataclasses.replace(other, max_model_len=n)))
    return fresh, build.build_vllm_config(config, model_dir)


@pytest.mark.parametrize("config", CONFIGS, ids=["plain", "async-spec", "sliding"])
def test_a_vllm_config_from_the_cached_model_config_equals_a_fresh_one(config):
    fresh, cached = _fresh_and_cached(config)
    assert fresh.model_config is not cached.model_config
    names = [f.name for f in dataclasses.fields(fresh)]
    assert names == [f.name for f in dataclasses.fields(cached)]
    for f in dataclasses.fields(fresh):
        if f.name != "instance_id":
            assert getattr(fresh, f.name) == getattr(cached, f.name), f.name
    assert _state(fresh.model_config) == _state(cached.model_config)


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
    fresh = scenario.run()
    cached = scenario.run()
    assert fresh.fingerprint and cached.fingerprint == fresh.fingerprint
    assert [v.to_json() for v in cached.violations] == [v.to_json() for v in fresh.violations]
    assert (cached.steps, cached.finished) == (fresh.steps, fresh.finished)
