"""Runs to bundles and back: write what reproduces a run, rebuild the run from a bundle.

A bundle (traces/bundle.py) holds the requests as replayed (windowed and rescaled), so a
rerun needs no trace options: `schedcheck replay --bundle DIR` rebuilds the engine config,
the simulator options and the cost model from config.json and must give the same
violations and the same fingerprint.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import StepCostModel
from schedcheck.sim.loop import RunResult, SimOptions, run
from schedcheck.traces import read_trace, request_to_line
from schedcheck.traces.bundle import read_bundle, write_bundle

# The simulator options that change what a run does (progress bars and recording do not).
_SIM_FIELDS = (
    "seed",
    "steps_max",
    "stall_steps_max",
    "liveness_steps_max",
    "pool_check_interval_steps",
    "keep_going",
    "check_invariants",
    "vocab_size",
    "executor",
    "context_steps",
    "faults",
    "ignore",
    "draft_acceptance",
)


def run_config(result: RunResult) -> dict[str, Any]:
    config = dataclasses.asdict(result.config)
    config["extra"] = dict(result.config.extra)
    return {
        "engine": result.engine,
        "engine_config": config,
        "sim": _sim_fields(result.options),
        "executor_options": dict(result.options.executor_options),
        "cost": dataclasses.asdict(result.cost),
        "seed": result.options.seed,
        "mutant": result.config.mutant,
        "executor": result.options.executor,
    }


def _sim_fields(options: SimOptions) -> dict[str, Any]:
    """The options that change what a run does; eos_token_id only where set (a bundle
    written before it existed reads the same)."""
    fields = {name: _plain(getattr(options, name)) for name in _SIM_FIELDS}
    if options.eos_token_id is not None:
        fields["eos_token_id"] = options.eos_token_id
    return fields


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def ensure_recorded(result: RunResult) -> RunResult:
    """The same run with its schedule kept (rerun from the requests it read, if needed),
    and, when it holds a violation, the engine's block events (for its report)."""
    events = bool(result.violations)
    if result.options.record_schedule and (result.options.record_kv_events or not events):
        return result
    options = dataclasses.replace(
        result.options, record_schedule=True, record_kv_events=events, progress=False
    )
    again = run(result.trace, result.engine, result.config, options, result.cost)
    assert again.fingerprint == result.fingerprint, "a rerun must give the same schedule"
    return again


def save_bundle(path: str | os.PathLike[str], result: RunResult, command: str = "") -> Path:
    recorded = ensure_recorded(result)
    root = Path(path).resolve()
    command = command or f"schedcheck replay --bundle {root}"
    return write_bundle(
        root,
        trace_lines=(request_to_line(r) for r in recorded.trace),
        config=run_config(recorded),
        schedule=recorded.schedule,
        outputs=recorded.outputs,
        violations=[v.to_json() for v in recorded.violations],
        summary={**recorded.summary(), "violations": len(recorded.violations)},
        command=command,
        kv_events=recorded.kv_events if recorded.options.record_kv_events else None,
    )


def rerun_bundle(path: str | os.PathLike[str], progress: bool = False) -> tuple[RunResult, Any]:
    """Replay a bundle's requests with its config; returns (result, the bundle read)."""
    bundle = read_bundle(path)
    cfg = bundle.config
    engine_config = EngineConfig(**cfg["engine_config"])
    options = SimOptions(
        **cfg["sim"],
        executor_options=cfg.get("executor_options", {}),
        record_schedule=True,
        progress=progress,
    )
    cost = StepCostModel(**cfg["cost"])
    result = run(list(read_trace(bundle.trace_path)), cfg["engine"], engine_config, options, cost)
    return result, bundle


def same_violations(result: RunResult, recorded: list[dict[str, Any]]) -> bool:
    """The rerun found the same violations (invariant, step, request, position, slot)."""
    keys = ("invariant", "step", "request_id", "position", "slot", "block")
    found = [tuple(v.to_json()[k] for k in keys) for v in result.violations]
    return found == [tuple(v.get(k) for k in keys) for v in recorded]
