"""`schedcheck verify --engine vllm-engine BUNDLE`: the kernel replay's two runs.

A bundle's arrivals through vLLM's whole engine on its CPU kernels, as recorded and each
request alone unchunked and uncached, through the simulator's loop; gpu/vllm_engine.py
compares them (`kernel_report`). Here, not in gpu/, because gpu/ never imports the loop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from schedcheck.engines.protocol import EngineConfig
from schedcheck.gpu.vllm_engine import (
    KERNEL_ENGINE,
    KernelReport,
    KernelRun,
    baseline_config,
    kernel_config,
    kernel_report,
)
from schedcheck.sim.cost_model import StepCostModel
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces import read_trace
from schedcheck.traces.bundle import read_bundle
from schedcheck.traces.schema import TraceRequest


def kernel_run(
    trace: Sequence[TraceRequest],
    config: EngineConfig,
    options: SimOptions,
    cost: StepCostModel,
    engine: str = KERNEL_ENGINE,
) -> KernelRun:
    """The arrivals through vLLM's engine on its CPU kernels, its schedule and samples kept."""
    start = time.perf_counter()
    sim = Simulation(trace, engine, config, options, cost)
    result = sim.run()
    samples = dict(getattr(sim.engine, "samples", {}))
    return KernelRun(config, result, samples, time.perf_counter() - start)


def verify_bundle_on_vllm(path: str | Path, engine: str = KERNEL_ENGINE) -> KernelReport:
    """Replay a bundle's arrivals through vLLM's engine twice and compare.

    Raises ValueError when the bundle is unreadable or the engine refuses its config.
    `engine` names the kernel engine's factory (tests wrap it)."""
    bundle = read_bundle(path)
    cfg = bundle.config
    recorded = EngineConfig(**cfg["engine_config"])
    config, notes = kernel_config(recorded)
    sim = {k: v for k, v in cfg.get("sim", {}).items() if k != "progress"}
    if sim.get("eos_token_id") is not None:  # Capabilities.eos: False
        raise ValueError(f"{path}: its requests stop at an EOS; vllm-engine drives no EOS stops")
    options = SimOptions(
        **{**sim, "keep_going": True},
        executor_options=cfg.get("executor_options", {}),
        record_schedule=True,
    )
    cost = StepCostModel(**cfg["cost"])
    trace = list(read_trace(bundle.trace_path))
    replay = kernel_run(trace, config, options, cost, engine)
    baseline = kernel_run(trace, baseline_config(config, trace), options, cost, engine)
    return kernel_report(bundle, recorded, config, notes, replay, baseline)
