"""vLLM's scheduler options reach the whole engine (issue #29, reach): the policy and the
`vllm:` SchedulerConfig options the vllm-v1 swarm draws are fitted as vllm-v1 fits them,
passed into vLLM's own config through EngineArgs, and run clean; the queue limits are
the API server's (frontend.py), checked before a request reaches the engine core."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.vllm.engine import factory
from schedcheck.traces.schema import TraceRequest

pytestmark = pytest.mark.vllm_cpu

BASE = EngineConfig(block_size=16, num_gpu_blocks=64, max_num_batched_tokens=64, max_num_seqs=4)


def _trace(priorities: tuple[int, ...], prompt: int = 40, output: int = 3) -> list[TraceRequest]:
    rng = np.random.default_rng(3)
    return [
        TraceRequest(
            request_id=f"r{i}",
            arrival_time_s=0.0,
            output_length=output,
            prompt_token_ids=tuple(rng.integers(3, 32_000, prompt).tolist()),
            priority=p,
        )
        for i, p in enumerate(priorities)  # bounded: a few requests
    ]


def _built(config: EngineConfig):  # type: ignore[no-untyped-def]
    return factory.make_engine(factory.fit_config(config))


def test_fit_keeps_the_scheduler_options_and_drops_what_the_cpu_engine_lacks() -> None:
    drawn = EngineConfig(
        max_num_batched_tokens=8,
        max_num_seqs=4,
        num_speculative_tokens=2,
        kv_groups="full,sliding:8",
        extra={
            "policy": "priority",
            "async_scheduling": "true",
            "vllm:max_num_active_seqs": "6",  # capped at max_num_seqs, as vllm-v1's fit
            "vllm:watermark": "0.1",
            "vllm:cache_aware_admission_window": "2",  # 0.34 only: not in vLLM 0.32
            "vllm:max_num_queued_reqs": "3",
        },
    )
    fitted = factory.fit_config(drawn)
    assert dict(fitted.extra) == {
        "policy": "priority",
        "vllm:max_num_active_seqs": "4",
        "vllm:watermark": "0.1",
        "vllm:max_num_queued_reqs": "3",
    }
    assert (fitted.num_speculative_tokens, fitted.kv_groups) == (0, "full")
    assert factory.refusal(fitted) is None
    assert "async" in (factory.refusal(EngineConfig(extra={"async_scheduling": "true"})) or "")


def test_priority_policy_reaches_vllms_scheduler_and_runs_clean() -> None:
    from schedcheck.sim.loop import SimOptions, run

    config = EngineConfig(
        block_size=16, num_gpu_blocks=64, max_num_batched_tokens=64, max_num_seqs=1,
        extra={"policy": "priority"},
    )  # fmt: skip
    engine = _built(config)
    assert engine.scheduler.scheduler_config.policy == "priority"
    trace = _trace((5, 0))  # r0 first in the queue, r1 of higher priority (lower value)
    result = run(trace, "vllm-engine", config, SimOptions(record_schedule=True))
    assert result.violations == [] and not result.stuck and result.finished == 2
    assert [r.request_id for r in result.schedule[0].scheduled] == ["r1"]
    fcfs = dataclasses.replace(config, extra={})
    fcfs_result = run(trace, "vllm-engine", fcfs, SimOptions(record_schedule=True))
    assert [r.request_id for r in fcfs_result.schedule[0].scheduled] == ["r0"]


def test_max_num_scheduled_tokens_reaches_vllms_scheduler_and_caps_each_step() -> None:
    from schedcheck.sim.loop import SimOptions, run

    extra = {"vllm:max_num_scheduled_tokens": "24", "vllm:watermark": "0.1"}
    config = dataclasses.replace(BASE, extra=extra)
    scheduler_config = _built(config).scheduler.scheduler_config
    assert (scheduler_config.max_num_scheduled_tokens, scheduler_config.watermark) == (24, 0.1)
    result = run(_trace((0, 0, 0)), "vllm-engine", config, SimOptions(record_schedule=True))
    assert result.violations == [] and not result.stuck and result.finished == 3
    per_step = [sum(r.num_scheduled_tokens for r in out.scheduled) for out in result.schedule]
    assert max(per_step) == 24  # 64 without the option: three prompts of 40


def test_queue_limit_rejects_at_the_frontend_as_vllms_api_server() -> None:
    from schedcheck.sim.loop import SimOptions, run

    config = dataclasses.replace(BASE, extra={"vllm:max_num_queued_reqs": "2"})
    engine = _built(config)
    assert engine.scheduler.scheduler_config.max_num_queued_reqs == 2
    result = run(_trace((0, 0, 0)), "vllm-engine", config, SimOptions())
    assert result.violations == [] and not result.stuck
    assert (result.finished, result.rejected) == (2, 1)
    assert result.coverage.get("queue-full-rejection") == 1


def test_an_engine_built_after_others_replays_in_a_fresh_process(tmp_path) -> None:
    """Nothing an engine leaves in the process (vLLM's kernel overrides registered once,
    the heap frozen once: build.py) changes a later engine's run: a run recorded after
    the engines above replays in a fresh process with the same fingerprint."""
    import json
    import subprocess
    import sys

    from schedcheck.sim.bundles import save_bundle
    from schedcheck.sim.loop import SimOptions, run

    config = dataclasses.replace(
        BASE, num_gpu_blocks=8, max_num_batched_tokens=24, extra={"policy": "priority"}
    )
    result = run(_trace((2, 0, 1)), "vllm-engine", config, SimOptions(record_schedule=True))
    assert result.violations == [] and result.finished == 3
    bundle = save_bundle(tmp_path / "bundle", result)
    cmd = [sys.executable, "-m", "schedcheck.cli", "replay", "--bundle", str(bundle), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    replayed = json.loads(done.stdout)
    assert replayed["reproduced"] and replayed["bundle_fingerprint"] == result.fingerprint
