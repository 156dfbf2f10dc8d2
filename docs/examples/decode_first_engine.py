"""A small decode-first scheduler with a paged KV cache: an engine to put under schedcheck.

Run it with `--engine decode_first_engine:make_engine` and this folder on PYTHONPATH:

    PYTHONPATH=docs/examples schedcheck replay --engine decode_first_engine:make_engine
    PYTHONPATH=docs/examples schedcheck fuzz --engine decode_first_engine:make_engine --budget-s 30

Policy (Sarathi-style "decode first, then fill the budget with prefill chunks"):

1. every running request that is decoding (one token left to compute) runs first;
2. then running requests still in prefill continue their next chunk, in admission order;
3. then waiting requests are admitted first come, first served, while the token budget,
   max_num_seqs and free blocks allow; the head of the queue blocks the rest (no skipping).

KV cache: `num_gpu_blocks` blocks of `block_size` slots, a FIFO free list, no prefix
caching (every request computes its whole prompt) and so no copy-on-write. When a running
request needs a block and none is free, the most recently admitted running request not yet
scheduled in this step is preempted by recomputation: its blocks are freed, it goes back to
the front of the waiting queue and later recomputes its prompt and outputs. A request that
can never fit (more blocks than the cache, or longer than max_model_len) is rejected when
it is added.

This is a scheduler written for the docs, not a copy of the reference engine: no prefix
cache, a different order (decodes before prefills), a different victim. The tests import
it (tests/docs/test_example_engine.py): it replays the bundled trace clean and a short
fuzz campaign finds nothing, while a one-line bug planted in it is found.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from schedcheck.engines.capabilities import Capabilities, declare
from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    ScheduledRequest,
    SchedulerOutput,
)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Request:
    """One request's state: its tokens (prompt + outputs) and its KV blocks."""

    request_id: str
    token_ids: list[int]  # prompt, then every sampled token
    num_prompt_tokens: int
    max_tokens: int
    num_computed_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens


class BlockAllocator:
    """Fixed-size KV blocks, each held by at most one request (no sharing: no prefix cache)."""

    def __init__(self, num_blocks: int) -> None:
        self.free_ids: deque[int] = deque(range(num_blocks))  # allocated from the front
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int64)

    def grow(self, request: Request, num_blocks: int) -> bool:
        """Give `request` blocks until it holds `num_blocks`; False (nothing taken) if short."""
        need = num_blocks - len(request.block_ids)
        if need > len(self.free_ids):
            return False
        for _ in range(max(need, 0)):
            block_id = self.free_ids.popleft()
            self.ref_cnt[block_id] = 1
            request.block_ids.append(block_id)
        return True

    def release(self, request: Request) -> None:
        for block_id in request.block_ids:
            assert self.ref_cnt[block_id] == 1, f"block {block_id} freed twice"
            self.ref_cnt[block_id] = 0
            self.free_ids.append(block_id)
        request.block_ids = []


class Snapshot:
    """`protocol.KVSnapshot` answered from the engine's own structures."""

    def __init__(self, engine: DecodeFirstEngine) -> None:
        self.engine = engine
        self.block_size = engine.config.block_size
        self.num_blocks = engine.config.num_gpu_blocks

    def ref_cnt(self) -> np.ndarray:
        return self.engine.allocator.ref_cnt

    def free_block_ids(self) -> Sequence[int]:
        return tuple(self.engine.allocator.free_ids)

    def cached_blocks(self) -> Mapping[int, bytes]:
        return {}  # no prefix cache

    def block_tables(self) -> Mapping[str, Sequence[int]]:
        return {r.request_id: tuple(r.block_ids) for r in self.engine.running if r.block_ids}

    def num_computed_tokens(self) -> Mapping[str, int]:
        return {r.request_id: r.num_computed_tokens for r in self.engine.running}


class DecodeFirstEngine:
    """Implements `schedcheck.engines.protocol.Engine`."""

    name = "decode-first"

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.allocator = BlockAllocator(config.num_gpu_blocks)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order
        self.step = 0
        self.finished: list[FinishedRequest] = []  # aborted or rejected since the last update
        self.finished_ids: list[str] = []  # finished since the last schedule()
        self.rejected: list[tuple[str, str]] = []  # (request id, reason), not yet reported

    # -- requests in and out -----------------------------------------------------------------

    def add_request(self, request: EngineRequest) -> None:
        req = Request(
            request.request_id,
            [int(t) for t in request.prompt_token_ids],
            request.num_prompt_tokens,
            request.max_tokens,
        )
        reason = self._reject_reason(req)
        if reason:
            self.rejected.append((req.request_id, reason))
            self.finished.append(FinishedRequest(req.request_id, (), f"rejected: {reason}"))
        else:
            self.waiting.append(req)

    def _reject_reason(self, req: Request) -> str:
        """Why `req` can never run to its end here ("" if it can)."""
        cfg = self.config
        total = req.num_prompt_tokens + req.max_tokens
        if total > cfg.max_model_len:
            return f"{total} tokens exceed max_model_len {cfg.max_model_len}"
        # the last sampled token never needs KV; drafts need lookahead slots past the rest
        num_slots = min(total - 1 + cfg.num_lookahead_tokens, cfg.max_model_len)
        if cdiv(num_slots, cfg.block_size) > cfg.num_gpu_blocks:
            return f"{num_slots} KV slots exceed the cache ({cfg.num_gpu_blocks} blocks)"
        if not cfg.enable_chunked_prefill and total - 1 > cfg.max_num_batched_tokens:
            return f"unchunked prefill of {total - 1} tokens exceeds the token budget"
        return ""

    def abort_request(self, request_id: str) -> None:
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.request_id == request_id:
                    queue.remove(req)
                    self._finish(req, "abort", self.finished)
                    return

    def _finish(self, req: Request, reason: str, into: list[FinishedRequest]) -> None:
        self.allocator.release(req)
        outputs = tuple(req.token_ids[req.num_prompt_tokens :])
        into.append(FinishedRequest(req.request_id, outputs, reason))
        self.finished_ids.append(req.request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running or self.rejected)

    def waiting_reasons(self) -> Mapping[str, str]:
        head = self.waiting[0].request_id if self.waiting else ""
        return {r.request_id: f"waiting behind {head!r} for blocks or budget" for r in self.waiting}

    def kv_snapshot(self) -> Snapshot:
        return Snapshot(self)

    # -- one step ------------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        self.step += 1
        budget = [self.config.max_num_batched_tokens]  # left this step (a cell: helpers spend it)
        chunks: dict[str, int] = {}  # request id -> tokens scheduled, in batch order
        preempted: list[str] = []
        decoding = [r for r in self.running if r.num_tokens - r.num_computed_tokens == 1]
        prefilling = [r for r in self.running if r.num_tokens - r.num_computed_tokens > 1]
        for req in decoding + prefilling:
            if req in self.running and budget[0] > 0:
                self._schedule_running(req, budget, chunks, preempted)
        if not preempted:
            self._admit_waiting(budget, chunks)
        output = SchedulerOutput(
            step=self.step,
            scheduled=tuple(self._scheduled(rid, n) for rid, n in chunks.items()),
            preempted_req_ids=tuple(preempted),
            finished_req_ids=tuple(self.finished_ids),
            rejected_req_ids=tuple(rid for rid, _ in self.rejected),
            rejected_reasons=tuple(reason for _, reason in self.rejected),
        )
        self.finished_ids, self.rejected = [], []
        return output

    def _chunk(self, req: Request, budget: int) -> int:
        """Tokens `req` runs this step within `budget` (0: it cannot run now)."""
        remaining = req.num_tokens - req.num_computed_tokens
        threshold = self.config.long_prefill_token_threshold
        if threshold and remaining > 1:
            remaining = min(remaining, threshold)
        if not self.config.enable_chunked_prefill:
            return remaining if remaining <= budget else 0
        return min(remaining, budget)

    def _blocks_for(self, req: Request, num_end_tokens: int) -> int:
        """Blocks covering the step's tokens plus the drafter's lookahead slots."""
        cfg = self.config
        num_slots = min(num_end_tokens + cfg.num_lookahead_tokens, cfg.max_model_len)
        return cdiv(max(num_slots, num_end_tokens), cfg.block_size)

    def _schedule_running(
        self, req: Request, budget: list[int], chunks: dict[str, int], preempted: list[str]
    ) -> None:
        """Run `req`'s next chunk, preempting the newest unscheduled requests for blocks."""
        num_new = self._chunk(req, budget[0])
        if num_new == 0:
            return
        need = self._blocks_for(req, req.num_computed_tokens + num_new)
        while not self.allocator.grow(req, need):
            victims = [r for r in self.running if r.request_id not in chunks]
            victim = victims[-1]  # the newest; `req` itself when it is the only one left
            self._preempt(victim)
            preempted.append(victim.request_id)
            if victim is req:
                return
        chunks[req.request_id] = num_new
        budget[0] -= num_new

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.allocator.release(req)
        req.num_computed_tokens = 0  # recompute prompt and outputs on readmission
        self.waiting.appendleft(req)

    def _admit_waiting(self, budget: list[int], chunks: dict[str, int]) -> None:
        """Admit from the head of the queue while budget, seats and blocks allow."""
        while self.waiting and budget[0] > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            num_new = self._chunk(req, budget[0])
            if num_new == 0 or not self.allocator.grow(req, self._blocks_for(req, num_new)):
                return
            self.waiting.popleft()
            self.running.append(req)
            chunks[req.request_id] = num_new
            budget[0] -= num_new

    def _scheduled(self, request_id: str, num_new: int) -> ScheduledRequest:
        req = next(r for r in self.running if r.request_id == request_id)
        start = req.num_computed_tokens
        return ScheduledRequest(
            request_id=request_id,
            num_computed_tokens=start,
            num_scheduled_tokens=num_new,
            num_tokens=req.num_tokens,
            num_prompt_tokens=req.num_prompt_tokens,
            token_ids=np.asarray(req.token_ids[start : start + num_new], dtype=np.int64),
            block_table=tuple(req.block_ids),
        )

    # -- results -------------------------------------------------------------------------------

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> list[FinishedRequest]:
        finished, self.finished = self.finished, []
        by_id = {r.request_id: r for r in self.running}
        for scheduled in output.scheduled:
            req = by_id.get(scheduled.request_id)
            if req is None:
                continue  # aborted after this step was scheduled
            req.num_computed_tokens = scheduled.num_end_tokens
            if not scheduled.samples:
                continue
            req.token_ids.append(int(sampled_token_ids[req.request_id]))
            if req.num_output_tokens >= req.max_tokens:
                self.running.remove(req)
                self._finish(req, "length", finished)
        return finished


# What the engine supports (engines/capabilities.py): the fuzzer draws only this, replay and
# conformance refuse the rest. No prefix cache, so no cache salt; FCFS, so no priorities;
# the last sampled token is never run, so it needs no KV slot.
CAPABILITIES = Capabilities(
    enable_prefix_caching=(False,),
    cache_salt=False,
    priorities=False,
    kv_of_last_token=False,
)


@declare(CAPABILITIES)
def make_engine(config: EngineConfig) -> DecodeFirstEngine:
    """The factory `--engine decode_first_engine:make_engine` names."""
    return DecodeFirstEngine(config)
