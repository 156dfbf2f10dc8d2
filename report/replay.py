"""A bundle's recorded schedule replayed offline through the shadow KV, step by step.

No engine runs: the schedule (what the engine decided, step by step), the trace (the
prompts), outputs.json (a parent turn's outputs, for a later turn's prompt) and the config
(block size, runner mutant, lookahead) are enough to re-derive each step's runner metadata
and every KV write and read, exactly as the run's symbolic executor saw them::

    for each recorded step s:
        drop the tables of requests finished / preempted / rejected      (tables: who holds
        add newly scheduled requests to the shadow KV (full prompt)       which blocks now)
        meta = build_metadata(step s)  ->  shadow.execute(meta)
        observers see (s, meta, shadow, tables, violations of s)

The tables are the block tables the engine handed out, kept from each request's last
scheduled step until it leaves: a block's holders (and so its ref_cnt) as the schedule
shows them, not the engine's own free queue, which a bundle does not record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata, build_metadata
from schedcheck.engines.protocol import SchedulerOutput
from schedcheck.engines.reference.mutants import apply_runner_mutant
from schedcheck.invariants.violation import Violation
from schedcheck.report.blocks import BlockState
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.traces import read_trace
from schedcheck.traces.bundle import Bundle
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE


@dataclass(frozen=True)
class StepView:
    """One replayed step, as observers see it (read only; valid during `observe`)."""

    output: SchedulerOutput
    meta: RunnerMetadata
    shadow: SymbolicExecutor
    tables: Mapping[str, tuple[int, ...]]  # live request -> its block table now
    blocks: BlockState  # ref_cnt, full, cached of every block after this step
    left: tuple[str, ...]  # requests that left before this step (finished/preempted/rejected)
    violations: tuple[Violation, ...]


class Observer(Protocol):
    def observe(self, view: StepView) -> None: ...


class ScheduleReplay:
    """The shadow KV and the live block tables of one bundle, advanced one step at a time."""

    def __init__(self, bundle: Bundle) -> None:
        cfg = engine_config(bundle)
        self.block_size = int(cfg["block_size"])
        self.num_blocks = int(cfg["num_gpu_blocks"])
        self.mutant = cfg.get("mutant")
        self.num_lookahead_tokens = int(cfg.get("num_lookahead_tokens", 0) or 0)
        self.max_model_len = int(cfg.get("max_model_len", 131_072))
        self.vocab_size = int(bundle.config.get("sim", {}).get("vocab_size", DEFAULT_VOCAB_SIZE))
        self.shadow = SymbolicExecutor(self.num_blocks, self.block_size, self.vocab_size)
        self.shadow.current_table = self.tables_get
        self.trace: dict[str, TraceRequest] = {
            r.request_id: r for r in read_trace(bundle.trace_path)
        }
        self.outputs = {k: list(v) for k, v in bundle.outputs.items()}
        self.tables: dict[str, tuple[int, ...]] = {}
        prefix_caching = bool(cfg.get("enable_prefix_caching", True))
        self.blocks = BlockState(self.num_blocks, self.block_size, prefix_caching)
        self.violations: list[Violation] = []

    def tables_get(self, request_id: str) -> tuple[int, ...] | None:
        return self.tables.get(request_id)

    def step(self, output: SchedulerOutput) -> StepView:
        left = (*output.finished_req_ids, *output.rejected_req_ids, *output.preempted_req_ids)
        for rid in left:
            self.blocks.hold(self.tables.pop(rid, ()), -1)
        for rid in (*output.finished_req_ids, *output.rejected_req_ids):
            self.shadow.finish_request(rid)
        for r in output.scheduled:
            if r.request_id not in self.shadow.requests and r.request_id in self.trace:
                self._add(self.trace[r.request_id])
            self.blocks.change_table(self.tables.get(r.request_id, ()), r.block_table)
            self.tables[r.request_id] = r.block_table
        meta = build_metadata(
            output,
            self.block_size,
            num_lookahead_tokens=self.num_lookahead_tokens,
            max_model_len=self.max_model_len,
        )
        meta = apply_runner_mutant(meta, self.mutant)  # as the loop derives it
        self.shadow.execute(meta)
        self.blocks.after_writes(meta, self.shadow)
        found = tuple(self.shadow.violations)
        self.violations.extend(found)
        return StepView(output, meta, self.shadow, self.tables, self.blocks, left, found)

    def _add(self, request: TraceRequest) -> None:
        prompt = self.full_prompt(request)
        if request.cache_salt is None:
            self.shadow.add_request(request.request_id, prompt)
        else:
            self.shadow.add_request(request.request_id, prompt, cache_salt=request.cache_salt)

    def full_prompt(self, request: TraceRequest) -> np.ndarray:
        """Parent's full prompt + parent's outputs + own prompt (as sim/arrivals.py builds
        it; a parent's outputs are in outputs.json: it finished before its turn came)."""
        parts = [request.own_prompt_tokens(self.vocab_size)]
        parent_id = request.parent_request_id
        for _ in range(len(self.trace)):  # bounded: a chain visits each request once
            if parent_id is None or parent_id not in self.outputs or parent_id not in self.trace:
                break
            parent = self.trace[parent_id]
            parts.append(np.asarray(self.outputs[parent_id], dtype=np.int64))
            parts.append(parent.own_prompt_tokens(self.vocab_size))
            parent_id = parent.parent_request_id
        return parts[0] if len(parts) == 1 else np.concatenate(parts[::-1])


def engine_config(bundle: Bundle) -> dict:
    """config.json's engine_config; ValueError naming what is missing."""
    cfg = bundle.config.get("engine_config")
    where = bundle.path / "config.json"
    if not isinstance(cfg, dict):
        raise ValueError(f'{where}: no "engine_config" object')
    for key in ("block_size", "num_gpu_blocks"):
        if not isinstance(cfg.get(key), int) or cfg[key] < 1:
            raise ValueError(f"{where}: engine_config.{key} must be a positive integer")
    return cfg


def unmodelled(bundle: Bundle) -> str | None:
    """What of the run this replay does not re-derive, or None: with async scheduling and
    drafts, the runner moves a chunk back after a rejected draft, which the schedule alone
    does not show (the run drew the acceptances)."""
    cfg = engine_config(bundle)
    extra = cfg.get("extra") or {}
    drafts = int(cfg.get("num_speculative_tokens", 0) or 0) > 0
    if str(extra.get("async_scheduling", "")).lower() == "true" and drafts:
        return "async scheduling with drafts: the runner's moves after a rejected draft"
    return None


def replay(bundle: Bundle, observers: Iterable[Observer]) -> ScheduleReplay:
    """Run every recorded step through the shadow KV; each observer sees each step."""
    watchers = list(observers)
    state = ScheduleReplay(bundle)
    for output in bundle.schedule():  # bounded: the recorded schedule
        view = state.step(output)
        for watcher in watchers:
            watcher.observe(view)
    return state
