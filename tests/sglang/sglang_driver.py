"""Drive the sglang engine step by step through the shadow KV, as sim/loop.py does."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field

import numpy as np
import pytest

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import EngineConfig, EngineRequest, SchedulerOutput
from schedcheck.sim.symbolic import SymbolicExecutor


def _sglang_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


# the marks of a test module that drives SGLang 0.5.23 (skipped without it)
SGLANG_0_5_23 = [
    pytest.mark.sglang,
    pytest.mark.skipif(
        _sglang_version() != "0.5.23", reason="needs sglang==0.5.23 (tox -e sglang)"
    ),
]


def config(**overrides) -> EngineConfig:
    base = dict(
        block_size=1, num_gpu_blocks=64, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=48
    )
    base.update(overrides)
    return EngineConfig(**base)


def request(rid: str, prompt, max_tokens: int) -> EngineRequest:
    return EngineRequest(rid, np.asarray(prompt, dtype=np.int64), max_tokens)


@dataclass
class Driver:
    """One engine and its shadow KV; `step()` runs one scheduler step end to end."""

    cfg: EngineConfig
    engine: object = None
    executor: SymbolicExecutor = None  # type: ignore[assignment]
    outputs: list[SchedulerOutput] = field(default_factory=list)
    violations: list = field(default_factory=list)
    finished: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from schedcheck.engines.registry import make_engine

        self.engine = make_engine("sglang", self.cfg)
        self.executor = SymbolicExecutor(self.cfg.num_gpu_blocks, self.cfg.block_size)

    def add(self, req: EngineRequest) -> None:
        self.executor.add_request(req.request_id, req.prompt_token_ids)
        self.engine.add_request(req)

    def step(self) -> SchedulerOutput:
        out = self.engine.schedule()
        self.outputs.append(out)
        meta = build_metadata(out, self.cfg.block_size)
        runs = out.scheduled or out.preempted_req_ids or out.discarded
        sampled = self.executor.execute(meta) if runs else {}
        self.violations += self.executor.violations
        if out.scheduled:
            for f in self.engine.update_from_output(out, sampled):
                self.finished[f.request_id] = f
                self.executor.finish_request(f.request_id)
        return out

    def abort(self, request_id: str) -> None:
        """As the simulator aborts: the engine's abort, then the shadow forgets it."""
        self.engine.abort_request(request_id)
        self.executor.finish_request(request_id)

    def run(self, max_steps: int = 200) -> None:
        for _ in range(max_steps):  # bounded
            if not self.engine.has_unfinished_requests():
                return
            self.step()
        raise AssertionError(f"not done after {max_steps} steps")


def summary(out: SchedulerOutput) -> list[tuple]:
    """(id, num_computed, num_scheduled, num_cached, slots of the chunk) per request."""
    return [
        (
            r.request_id,
            r.num_computed_tokens,
            r.num_scheduled_tokens,
            r.num_cached_tokens,
            r.slots[r.num_computed_tokens : r.num_end_tokens],
        )
        for r in out.scheduled
    ]
