"""Shrinking outside Hypothesis: ddmin on a scenario's requests, or on a bundle's trace.

After Hypothesis has shrunk a finding, `shrink_scenario` removes whole requests that its
shrinker could not (a request that others copy a prefix from, or a parent turn).

`shrink_bundle` shrinks a failure found anywhere (a replayed real trace): first every
request released after the first violation is cut (it cannot have caused it), then ddmin
keeps the fewest requests that still fail the same way (same first invariant, or a
liveness failure). With a mutant, a candidate must also run clean without the mutant.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.registry import capabilities
from schedcheck.fuzz.ddmin import ddmin, subtrace
from schedcheck.fuzz.scenario import Scenario
from schedcheck.fuzz.swarm import blocks_to_run_alone
from schedcheck.fuzz.verdict import LIVENESS
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.cost_model import StepCostModel
from schedcheck.sim.loop import RunResult, SimOptions, run
from schedcheck.traces import read_trace
from schedcheck.traces.bundle import read_bundle
from schedcheck.traces.schema import TraceRequest

TIGHTEN_ROUNDS = 3


def shrink_scenario(scenario: Scenario, still_fails: Callable[[Scenario], bool]) -> Scenario:
    """A 1-minimal subset of the requests that still fails, under the fewest blocks tried.

    Fewer KV blocks put the same pressure on the cache with fewer requests, so ddmin runs
    again after each tightening (at most TIGHTEN_ROUNDS times).
    """
    current = _ddmin_requests(scenario, still_fails)
    for _ in range(TIGHTEN_ROUNDS):  # bounded
        tighter = _fewest_blocks(current, still_fails)
        if tighter.config.num_gpu_blocks == current.config.num_gpu_blocks:
            break
        current = _ddmin_requests(tighter, still_fails)
    return current


def _ddmin_requests(scenario: Scenario, still_fails: Callable[[Scenario], bool]) -> Scenario:
    def fails(requests: tuple[TraceRequest, ...]) -> bool:
        return still_fails(scenario.with_requests(subtrace(requests)))

    return scenario.with_requests(subtrace(ddmin(scenario.requests, fails)))


def _fewest_blocks(scenario: Scenario, still_fails: Callable[[Scenario], bool]) -> Scenario:
    """The scenario with the fewest blocks (of a few tried) that every request fits alone:
    never below the swarm's own bound (`blocks_to_run_alone`: draft slots and every
    KV-cache group counted), so a shrunk finding is one the swarm could have drawn, not a
    request larger than the pool (which waits forever in an engine that admits it)."""
    config = scenario.config
    blocks = config.num_gpu_blocks
    need = blocks_to_run_alone(
        scenario.requests,
        capabilities(scenario.engine),
        config.block_size,
        config.num_lookahead_tokens + config.num_speculative_tokens,
        len(config.kv_cache_groups),
    )
    if blocks <= need:
        return scenario  # already tight, or an oversize scenario (a rejection path)
    for candidate in sorted({need, need + 1, need + 2, (need + blocks) // 2}):
        if candidate < blocks:
            tighter = scenario.with_config(num_gpu_blocks=candidate)
            if still_fails(tighter):
                return tighter
    return scenario


def failure_kind(result: RunResult) -> str:
    """The first violation's invariant, "liveness", or "" for a clean run."""
    if result.violations:
        return result.violations[0].invariant
    return LIVENESS if result.stuck else ""


def failure_signature(result: RunResult) -> str:
    """The first violation's signature (the bug), "liveness", or "" for a clean run."""
    if result.violations:
        return result.violations[0].signature
    return LIVENESS if result.stuck else ""


@dataclasses.dataclass(frozen=True)
class BundleRun:
    """What a bundle's run needs besides its requests."""

    engine: str
    config: EngineConfig
    options: SimOptions
    cost: StepCostModel

    def with_mutant(self, mutant: str | None) -> BundleRun:
        return dataclasses.replace(self, config=dataclasses.replace(self.config, mutant=mutant))

    def run(self, requests: Sequence[TraceRequest], clean: bool = False) -> RunResult:
        """Run `requests` with the bundle's config (`clean`: without its mutant)."""
        config = dataclasses.replace(self.config, mutant=None) if clean else self.config
        return run(list(requests), self.engine, config, self.options, self.cost)


def bundle_run(path: str | os.PathLike[str]) -> tuple[BundleRun, list[TraceRequest]]:
    bundle = read_bundle(path)
    cfg = bundle.config
    options = SimOptions(**cfg["sim"], executor_options=cfg.get("executor_options", {}))
    parts = BundleRun(
        cfg["engine"], EngineConfig(**cfg["engine_config"]), options, StepCostModel(**cfg["cost"])
    )
    return parts, list(read_trace(bundle.trace_path))


def shrink_bundle(
    path: str | os.PathLike[str], out: str | os.PathLike[str], command: str = ""
) -> tuple[Path, int, int]:
    """Shrink a failing bundle into `out`; returns (bundle, requests before, after)."""
    parts, requests = bundle_run(path)
    first = parts.run(requests)
    signature = failure_signature(first)
    if not signature:
        raise ValueError(f"{path}: the bundle's run does not fail; nothing to shrink")
    if first.violations:
        cut_s = first.violations[0].sim_time_s
        requests = [r for r in requests if r.arrival_time_s <= cut_s]
    mutant = parts.config.mutant

    def fails(candidate: tuple[TraceRequest, ...]) -> bool:
        trace = subtrace(candidate)
        if failure_signature(parts.run(trace)) != signature:
            return False
        return mutant is None or not failure_kind(parts.run(trace, clean=True))

    kept = subtrace(ddmin(requests, fails)) if fails(tuple(requests)) else tuple(requests)
    result = parts.run(kept)
    return save_bundle(out, result, command), len(first.trace), len(kept)
