"""A deliberately simple engine for testing the loop alone: FCFS, chunked prefill, no prefix
cache, every block of a request (prompt + max_tokens) reserved at admission. A `fault`
re-creates one misalignment so the loop's checks can be seen to fire."""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    ScheduledRequest,
    SchedulerOutput,
)


@dataclass
class _Req:
    request: EngineRequest
    tokens: list[int]
    blocks: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    outputs: list[int] = field(default_factory=list)


class _Snapshot:
    def __init__(self, engine: ToyEngine) -> None:
        self.e = engine
        self.block_size = engine.config.block_size
        self.num_blocks = engine.config.num_gpu_blocks

    def ref_cnt(self):
        out = np.zeros(self.num_blocks, dtype=np.int64)
        for r in self.e.running:
            out[r.blocks] += 1
        return out

    def free_block_ids(self):
        return list(self.e.free)

    def cached_blocks(self):
        return {}

    def block_tables(self):
        return {r.request.request_id: r.blocks for r in self.e.running}

    def num_computed_tokens(self):
        return {r.request.request_id: r.num_computed_tokens for r in self.e.running}


class ToyEngine:
    name = "toy"

    def __init__(self, config: EngineConfig, fault: str | None = None) -> None:
        self.config = config
        self.fault = fault
        self.free = deque(range(config.num_gpu_blocks))
        self.waiting: deque[_Req] = deque()
        self.running: list[_Req] = []
        self.finished_ids: list[str] = []
        self.step = 0

    def add_request(self, request: EngineRequest) -> None:
        self.waiting.append(_Req(request, request.prompt_token_ids.tolist()))

    def abort_request(self, request_id: str) -> None:
        for r in list(self.running):
            if r.request.request_id == request_id:
                self._free(r)
        self.waiting = deque(r for r in self.waiting if r.request.request_id != request_id)
        self.finished_ids.append(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def waiting_reasons(self):
        return {r.request.request_id: "no free blocks" for r in self.waiting}

    def kv_snapshot(self):
        return _Snapshot(self)

    def schedule(self) -> SchedulerOutput:
        bs = self.config.block_size
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            r = self.waiting[0]
            need = -(-(len(r.tokens) + r.request.max_tokens) // bs)
            if need > len(self.free):
                break
            self.waiting.popleft()
            r.blocks = [self.free.popleft() for _ in range(need)]
            self.running.append(r)
        budget = self.config.max_num_batched_tokens
        scheduled = []
        for r in self.running:
            if budget == 0:
                break
            n = min(len(r.tokens) - r.num_computed_tokens, budget)
            budget -= n
            start = r.num_computed_tokens
            if self.fault == "stale-token" and r.outputs and start == len(r.tokens) - 1:
                chunk = np.array([r.outputs[0]], dtype=np.int64)  # feeds the first output again
            else:
                chunk = np.array(r.tokens[start : start + n], dtype=np.int64)
            table = list(r.blocks)
            if self.fault == "swap-blocks" and len(table) >= 2 and start > bs:
                table[0], table[1] = table[1], table[0]
            scheduled.append(
                ScheduledRequest(
                    r.request.request_id,
                    start,
                    n,
                    len(r.tokens),
                    r.request.num_prompt_tokens,
                    chunk,
                    tuple(table),
                )
            )
        self.step += 1
        done, self.finished_ids = tuple(self.finished_ids), []
        return SchedulerOutput(self.step, tuple(scheduled), finished_req_ids=done)

    def update_from_output(self, output, sampled):
        finished = []
        by_id = {r.request.request_id: r for r in self.running}
        for s in output.scheduled:
            r = by_id[s.request_id]
            r.num_computed_tokens += s.num_scheduled_tokens
            if s.request_id in sampled:
                r.tokens.append(sampled[s.request_id])
                r.outputs.append(sampled[s.request_id])
                if len(r.outputs) == r.request.max_tokens:
                    self._free(r)
                    finished.append(FinishedRequest(s.request_id, tuple(r.outputs), "length"))
        return finished

    def _free(self, r: _Req) -> None:
        self.running.remove(r)
        self.free.extend(reversed(r.blocks))
        r.blocks = []


def make_engine(config: EngineConfig) -> ToyEngine:
    return ToyEngine(config)


def make_swap_engine(config: EngineConfig) -> ToyEngine:
    return ToyEngine(config, fault="swap-blocks")


def make_stale_token_engine(config: EngineConfig) -> ToyEngine:
    return ToyEngine(config, fault="stale-token")


def make_changing_engine(config: EngineConfig) -> ToyEngine:
    """The toy engine with the fault named by $TOY_ENGINE_FAULT: code under test that changes."""
    return ToyEngine(config, fault=os.environ["TOY_ENGINE_FAULT"])
