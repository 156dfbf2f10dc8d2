"""The reference scheduler: vLLM v1's rule, with no separate prefill and decode phases.

Every request has `num_computed_tokens` and `num_tokens` (prompt + outputs). Each step the
scheduler lets every request's num_computed_tokens catch up with its num_tokens as far as
the token budget allows: a long prompt runs in chunks, a decode is a chunk of 1, a request
resumed after a preemption re-prefills prompt + every output so far.

One step::

    token_budget = max_num_batched_tokens
    1. RUNNING requests, in order: chunk = min(num_tokens - num_computed_tokens,
       long_prefill_token_threshold (if set), token_budget), aligned if chunk_align says so;
       no free blocks -> preempt a victim (largest priority value, then latest arrival) by
       recompute, and retry; if the victim is the request itself, stop this phase.
    2. WAITING requests (only if nothing was preempted in this step), in queue order, while
       len(running) < max_num_seqs: prefix hit (capped at num_tokens - 1), then chunk as
       above; with chunked prefill off a prompt that does not fit the remaining budget
       waits; no blocks -> stop (head-of-line, as vLLM does).
    Every allocation also covers num_lookahead_tokens slots past the chunk (capped at
    max_model_len), where speculative decoding's drafter writes its draft KV (vllm#16370).

Speculative decoding with acceptance (num_speculative_tokens K > 0): after a step the
drafter's proposals reach `update_draft_token_ids`; a decoding request (its last chunk
reached num_tokens) then runs its last token and its drafts in one chunk, capped by the
budget, the threshold and max_model_len - 1, as vLLM v1 does::

    | computed ............ | t | d1 d2 d3 |     chunk = 1 + drafts that fit
    0          num_computed_tokens        num_tokens + 3

`update_from_output` appends the accepted drafts and the bonus token, rolls
num_computed_tokens back by the rejected drafts, and only then caches full blocks: a block
holding rejected-draft KV is never cached.

    request:   | prefix hit (cached) | chunk (num_scheduled_tokens)  | rest, later steps |
               0               num_computed_tokens           +num_scheduled       num_tokens

`update_from_output` then advances num_computed_tokens by num_scheduled_tokens, lets the
block manager cache what became full and written, appends a sampled token for every request
whose chunk reached num_tokens, and finishes requests at max_tokens (reason "length") or at
the EOS they sampled ("stop"), freeing their blocks in reverse order. A request that can
never run (prompt + max_tokens > max_model_len, more blocks than the cache has, or - with
chunked prefill off - more tokens than the budget) is rejected at `add_request` and
reported in the next SchedulerOutput.

Differences from vLLM v1, on purpose: num_computed_tokens advances in update_from_output
(vLLM advances it right after scheduling, for async scheduling); blocks are cached after the
step that wrote them, not at allocation; the preemption victim is chosen by (priority,
arrival) under both policies (vLLM's FCFS pops the last running request).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    ScheduledRequest,
    SchedulerOutput,
)
from schedcheck.engines.reference.block_hash import BlockHasher
from schedcheck.engines.reference.chunking import CHUNK_ALIGN_MODES, align_chunk
from schedcheck.engines.reference.fast_output import make_scheduled_request
from schedcheck.engines.reference.kv_manager import EMPTY_HIT, KVCacheManager, PrefixHit, cdiv
from schedcheck.engines.reference.request import Request, RequestStatus
from schedcheck.engines.reference.request_queue import make_queue

_RUNNING = RequestStatus.RUNNING
_STOPPED = {"stop": RequestStatus.FINISHED_STOPPED, "length": RequestStatus.FINISHED_LENGTH}


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        kv_manager: KVCacheManager,
        hasher: BlockHasher,
        *,
        policy: str = "fcfs",
        chunk_align: str = "none",
    ) -> None:
        if chunk_align not in CHUNK_ALIGN_MODES:
            raise ValueError(f"chunk_align {chunk_align!r}: use one of {CHUNK_ALIGN_MODES}")
        assert kv_manager.block_size == hasher.block_size == config.block_size
        self.config = config
        self.kv_manager = kv_manager
        self.hasher = hasher
        self.block_size = config.block_size
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.max_num_seqs = config.max_num_seqs
        self.long_prefill_token_threshold = config.long_prefill_token_threshold
        self.max_model_len = config.max_model_len
        self.num_lookahead_tokens = config.num_lookahead_tokens  # draft KV slots (vllm#16370)
        self.num_speculative_tokens = config.num_speculative_tokens  # scheduled drafts
        self.enable_chunked_prefill = config.enable_chunked_prefill
        self.chunk_align = chunk_align if config.enable_prefix_caching else "none"
        _check_block_alignment(self.chunk_align, config)
        self._align = self.chunk_align != "none"
        self.policy = policy
        self.requests: dict[str, Request] = {}  # every request not finished
        self.waiting = make_queue(policy)
        self.running: list[Request] = []
        self.finished_req_ids: list[str] = []  # since the previous schedule()
        self._pending_finished: list[FinishedRequest] = []  # aborted / rejected, not returned
        self._pending_rejected: list[tuple[str, str]] = []
        self._head_reason: tuple[str, str] | None = None  # why the waiting head did not run
        self._next_step = 0
        self._budget_override: int | None = None
        self._forced_preempted: list[str] = []
        self._force_preempted_ever: set[str] = set()  # membership only, never iterated
        self._next_arrival_seq = 0
        # The hot loops inline _chunk_running and _scheduled_request (a call less per
        # request per step); a subclass that overrides a step they inline runs the methods.
        self._inline_steps = not any(_overrides(self, name) for name in _INLINED_STEPS)

    # -- requests in and out ---------------------------------------------------------------

    def add_request(self, engine_request: EngineRequest) -> None:
        request_id = engine_request.request_id
        if request_id in self.requests:
            raise ValueError(f"request {request_id!r} is already in the engine")
        request = Request(engine_request, self.hasher, self._next_arrival_seq)
        self._next_arrival_seq += 1
        reason = self._reject_reason(request)
        if reason is not None:
            request.status = RequestStatus.FINISHED_REJECTED
            self._pending_rejected.append((request_id, reason))
            self._pending_finished.append(FinishedRequest(request_id, (), f"rejected: {reason}"))
            return
        # Neither its int64 buffer nor its block hashes yet (vLLM hashes at Request creation):
        # a waiting request keeps its compact prompt alone, until _admit first considers it.
        self.requests[request_id] = request
        self.waiting.add(request)

    def _reject_reason(self, request: Request) -> str | None:
        """Why the request can never finish here, or None (vllm#39734: reject, never stall)."""
        return (
            self._too_long_reason(request)
            or self._too_many_blocks_reason(request)
            or self._over_budget_reason(request)
        )

    def _too_long_reason(self, request: Request) -> str | None:
        num_total_tokens = request.num_prompt_tokens + request.max_tokens
        if num_total_tokens <= self.max_model_len:
            return None
        return (
            f"prompt ({request.num_prompt_tokens} tokens) + max_tokens "
            f"({request.max_tokens}) = {num_total_tokens} exceeds max_model_len "
            f"({self.max_model_len})"
        )

    def _too_many_blocks_reason(self, request: Request) -> str | None:
        """More KV blocks than the whole cache has: it would block the waiting queue forever."""
        config = self.config
        num_kv_tokens = request.num_prompt_tokens + request.max_tokens - 1  # the last: no KV
        num_drafts_max = config.num_lookahead_tokens + config.num_speculative_tokens
        num_slots = min(num_kv_tokens + num_drafts_max, config.max_model_len)
        num_blocks = cdiv(num_slots, self.block_size)
        if num_blocks <= config.num_gpu_blocks:
            return None
        num_drafts = num_slots - num_kv_tokens
        drafts = f" + {num_drafts} lookahead" if num_drafts > 0 else ""
        return (
            f"needs {num_blocks} KV blocks for {num_kv_tokens} tokens{drafts}; the cache has "
            f"{config.num_gpu_blocks} blocks of {self.block_size} tokens"
        )

    def _over_budget_reason(self, request: Request) -> str | None:
        num_kv_tokens = request.num_prompt_tokens + request.max_tokens - 1
        if self.enable_chunked_prefill or num_kv_tokens <= self.max_num_batched_tokens:
            return None
        return (
            f"chunked prefill is off and its prompt + outputs (up to {num_kv_tokens} "
            f"tokens, re-prefilled at once after a preemption) exceed "
            f"max_num_batched_tokens ({self.max_num_batched_tokens})"
        )

    def abort_request(self, request_id: str) -> None:
        """Abort a waiting or running request at any point; unknown/finished ids are ignored.

        A running request's blocks are freed at once; what it cached stays cached (only
        blocks that were full and written are), the rest returns to the free pool.
        """
        request = self.requests.get(request_id)
        if request is None:
            return
        if request.status is _RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        self.kv_manager.free(request, aborted=True)  # a waiting request holds no blocks
        request.status = RequestStatus.FINISHED_ABORTED
        self._pending_finished.append(self._finish(request, "abort"))

    def _finish(self, request: Request, reason: str) -> FinishedRequest:
        assert request.is_finished
        del self.requests[request.request_id]
        self.finished_req_ids.append(request.request_id)
        return FinishedRequest(request.request_id, tuple(request.output_token_ids), reason)

    def has_unfinished_requests(self) -> bool:
        # Not `_pending_finished`: those are only handed out by update_from_output, which
        # the loop calls after a step that ran something; an abort or a rejection of the
        # last request would otherwise keep this True forever (a false liveness failure).
        return bool(self.requests or self._pending_rejected)

    # -- schedule --------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        step = self._next_step
        self._next_step += 1
        self._head_reason = None
        token_budget = self.max_num_batched_tokens
        if self._budget_override is not None:  # fault point: one step with a smaller budget
            token_budget, self._budget_override = self._budget_override, None
        budget_start = token_budget
        batch = _Batch()
        token_budget = self._schedule_running(token_budget, batch)
        if not batch.preempted:
            token_budget = self._schedule_waiting(token_budget, batch)
        elif len(self.waiting):
            self._blocked(
                self.waiting.peek(),
                "the waiting queue is skipped in a step that preempted a request",
            )
        assert 0 <= token_budget <= self.max_num_batched_tokens
        assert len(self.running) <= self.max_num_seqs
        assert sum(batch.num_scheduled) == budget_start - token_budget
        output = SchedulerOutput(
            step=step,
            scheduled=self._scheduled_requests(batch),
            preempted_req_ids=tuple(self._forced_preempted)
            + tuple(r.request_id for r in batch.preempted),
            finished_req_ids=tuple(self.finished_req_ids),
            rejected_req_ids=tuple(rid for rid, _ in self._pending_rejected),
            rejected_reasons=tuple(reason for _, reason in self._pending_rejected),
        )
        self.finished_req_ids.clear()
        self._pending_rejected.clear()
        self._forced_preempted.clear()
        return output

    # -- fault points (sim/faults.py) ------------------------------------------------------

    def force_preempt(self, victim_index: int) -> str | None:
        """Preempt a running request between steps (reported next step). Each request is
        preempted by the fault at most once, so faults alone can never livelock a run."""
        candidates = [r for r in self.running if r.request_id not in self._force_preempted_ever]
        if not candidates:
            return None
        victim = candidates[victim_index % len(candidates)]
        self._force_preempted_ever.add(victim.request_id)
        self.running.remove(victim)
        self._preempt(victim)
        self._forced_preempted.append(victim.request_id)
        return f"preempted {victim.request_id}"

    def reduce_next_budget(self, num_tokens: int) -> str:
        assert 1 <= num_tokens <= self.max_num_batched_tokens
        self._budget_override = num_tokens
        return f"next step's token budget {num_tokens}"

    # -- running requests ------------------------------------------------------------------

    def _schedule_running(self, token_budget: int, batch: _Batch) -> int:
        running = self.running
        allocate_slots = self.kv_manager.allocate_slots
        scheduled, num_scheduled, num_hit_tokens = batch.lists()
        threshold = self.long_prefill_token_threshold
        inline_chunks = self._inline_steps and not self._align
        index = 0
        while index < len(running) and token_budget > 0:  # bounded: index grows or len shrinks
            request = running[index]
            if request.spec_token_ids:
                num_new_tokens = self._chunk_with_drafts(request, token_budget)
            elif inline_chunks:  # _chunk_running, inlined for the common case
                num_new_tokens = request.num_tokens - request.num_computed_tokens
                if 0 < threshold < num_new_tokens:
                    num_new_tokens = threshold
                if num_new_tokens > token_budget:
                    num_new_tokens = token_budget
            else:
                num_new_tokens = self._chunk_running(request, token_budget)
            if num_new_tokens == 0:
                index += 1
                continue
            num_lookahead_tokens = 0
            if self.num_lookahead_tokens:
                num_end_tokens = request.num_computed_tokens + num_new_tokens
                num_lookahead_tokens = self._num_lookahead(num_end_tokens)
            if not allocate_slots(request, num_new_tokens, EMPTY_HIT, num_lookahead_tokens):
                index, token_budget = self._preempt_until_allocated(
                    request, num_new_tokens, num_lookahead_tokens, index, token_budget, batch
                )
                if request.status is not _RUNNING:
                    return token_budget  # it preempted itself: stop (vLLM breaks here)
            scheduled.append(request)
            num_scheduled.append(num_new_tokens)
            num_hit_tokens.append(0)
            token_budget -= num_new_tokens
            index += 1
        return token_budget

    def _chunk_with_drafts(self, request: Request, token_budget: int) -> int:
        """A decode with its proposed drafts: 1 + K tokens, capped by the threshold, the
        budget and max_model_len - 1 (vLLM: positions stay below max_model_len); the drafts
        that fit are the ones scheduled (`_scheduled_request`)."""
        num_new_tokens = request.num_tokens + len(request.spec_token_ids)
        num_new_tokens = self._cap_long_prefill(num_new_tokens - request.num_computed_tokens)
        cap = self.max_model_len - 1 - request.num_computed_tokens
        return max(0, min(num_new_tokens, token_budget, cap))

    def _chunk_running(self, request: Request, token_budget: int) -> int:
        """The next chunk of a running request: its decode token or its prefill's next part."""
        num_target_tokens = self._num_target_tokens(request)
        num_new_tokens = self._cap_long_prefill(num_target_tokens - request.num_computed_tokens)
        num_new_tokens = min(num_new_tokens, token_budget)
        if self._align and num_new_tokens > 0:
            num_new_tokens = self._aligned(
                request, request.num_computed_tokens, num_new_tokens, num_target_tokens
            )
        return num_new_tokens

    def _preempt_until_allocated(
        self,
        request: Request,
        num_new_tokens: int,
        num_lookahead_tokens: int,
        index: int,
        token_budget: int,
        batch: _Batch,
    ) -> tuple[int, int]:
        """Preempt victims until the request's chunk gets its blocks or the request itself
        is the victim; returns the request's index in `running` and the budget left."""
        running = self.running
        while True:  # bounded: every iteration removes one request from `running`
            victim = self._preemption_victim()
            victim_index = running.index(victim)
            del running[victim_index]
            token_budget += batch.remove(victim)
            if victim_index < index:
                index -= 1
            self._preempt(victim)
            batch.preempted.append(victim)
            if victim is request or self.kv_manager.allocate_slots(
                request, num_new_tokens, EMPTY_HIT, num_lookahead_tokens
            ):
                return index, token_budget

    # -- waiting requests ------------------------------------------------------------------

    def _schedule_waiting(self, token_budget: int, batch: _Batch) -> int:
        waiting = self.waiting
        while len(waiting) and token_budget > 0:  # bounded: each iteration pops or breaks
            request = waiting.peek()
            if len(self.running) >= self.max_num_seqs:
                self._blocked(request, f"max_num_seqs ({self.max_num_seqs}) requests running")
                break
            num_new_tokens = self._admit(request, token_budget, batch)
            if num_new_tokens == 0:
                break  # _admit recorded why
            token_budget -= num_new_tokens
        if len(waiting) and token_budget == 0 and self._head_reason is None:
            self._blocked(
                waiting.peek(),
                f"the token budget (max_num_batched_tokens={self.max_num_batched_tokens}) "
                "was used up",
            )
        return token_budget

    def _admit(self, request: Request, token_budget: int, batch: _Batch) -> int:
        """Move the head of the waiting queue to running with its first chunk after its
        prefix hit; returns the chunk's token count, or 0 if it waits (and records why)."""
        request.build_tokens()  # its int64 buffer, once (a no-op after the first attempt)
        hit = self._prefix_hit(request)
        num_new_tokens = self._chunk_waiting(request, hit, token_budget)
        if num_new_tokens == 0 or not self._allocate_waiting(request, num_new_tokens, hit):
            return 0
        popped = self.waiting.pop()
        assert popped is request
        self.running.append(request)
        request.status = _RUNNING
        request.num_computed_tokens = hit.num_tokens
        if request.num_cached_tokens < 0:
            request.num_cached_tokens = hit.num_tokens
        batch.requests.append(request)
        batch.num_scheduled.append(num_new_tokens)
        batch.num_hit_tokens.append(hit.num_tokens)
        return num_new_tokens

    def _prefix_hit(self, request: Request) -> PrefixHit:
        assert request.num_computed_tokens == 0, "waiting requests start from scratch"
        return self.kv_manager.get_computed_blocks(request)

    def _chunk_waiting(self, request: Request, hit: PrefixHit, token_budget: int) -> int:
        """The first chunk, from the end of the prefix hit; 0 if none can run this step."""
        num_target_tokens = self._num_target_tokens(request)
        num_new_tokens = self._cap_long_prefill(num_target_tokens - hit.num_tokens)
        if not self._fits_unchunked(request, num_new_tokens, token_budget):
            return 0
        num_new_tokens = min(num_new_tokens, token_budget)
        if self._align and num_new_tokens > 0:
            num_new_tokens = self._aligned(
                request, hit.num_tokens, num_new_tokens, num_target_tokens
            )
        if num_new_tokens <= 0:
            self._blocked(
                request,
                f"nothing to compute this step (prefix hit {hit.num_tokens} of "
                f"{num_target_tokens} tokens, {token_budget} tokens of budget left)",
            )
            return 0
        return num_new_tokens

    def _fits_unchunked(self, request: Request, num_new_tokens: int, token_budget: int) -> bool:
        """With chunked prefill off a prompt runs whole, or waits for a step with room."""
        if self.enable_chunked_prefill or num_new_tokens <= token_budget:
            return True
        self._blocked(
            request,
            f"chunked prefill is off and its {num_new_tokens} tokens exceed the "
            f"{token_budget} tokens left in this step's budget",
        )
        return False

    def _allocate_waiting(self, request: Request, num_new_tokens: int, hit: PrefixHit) -> bool:
        """Blocks for the hit, the first chunk and its lookahead slots; False (and why) if
        the cache cannot give them now."""
        num_end_tokens = hit.num_tokens + num_new_tokens
        num_lookahead_tokens = self._num_lookahead(num_end_tokens)
        kv_manager = self.kv_manager
        if kv_manager.allocate_slots(request, num_new_tokens, hit, num_lookahead_tokens):
            return True
        num_tokens_need_slot = num_end_tokens + num_lookahead_tokens
        num_new_blocks = cdiv(num_tokens_need_slot, self.block_size) - len(hit.block_ids)
        self._blocked(
            request,
            f"not enough KV blocks: {len(hit.block_ids)} cached + {num_new_blocks} new "
            f"blocks for {num_tokens_need_slot} tokens, "
            f"{kv_manager.num_free_blocks()} free or evictable of {kv_manager.num_blocks}",
        )
        return False

    def _blocked(self, request: Request, reason: str) -> None:
        self._head_reason = (request.request_id, reason)

    # -- chunk sizes -----------------------------------------------------------------------

    def _num_target_tokens(self, request: Request) -> int:
        """The tokens num_computed_tokens catches up with: prompt + every output so far."""
        return request.num_tokens

    def _cap_long_prefill(self, num_new_tokens: int) -> int:
        threshold = self.long_prefill_token_threshold
        return threshold if 0 < threshold < num_new_tokens else num_new_tokens

    def _aligned(
        self, request: Request, num_computed_tokens: int, num_new_tokens: int, num_target: int
    ) -> int:
        return align_chunk(
            self.chunk_align,
            self.block_size,
            num_computed_tokens,
            num_new_tokens,
            num_target,
            request.num_prompt_tokens,
        )

    def _num_lookahead(self, num_end_tokens: int) -> int:
        """Draft slots past a request's first `num_end_tokens` tokens, capped at
        max_model_len (vLLM v1's allocate_slots caps them the same way)."""
        return max(0, min(self.num_lookahead_tokens, self.max_model_len - num_end_tokens))

    # -- preemption ------------------------------------------------------------------------

    def _preemption_victim(self) -> Request:
        """The running request with the largest priority value, then the latest arrival."""
        assert self.running
        return max(self.running, key=lambda r: (r.priority, r.arrival_time_s, r.arrival_seq))

    def _preempt(self, request: Request) -> None:
        """Recompute preemption: free the blocks (cached ones stay cached), back to waiting.

        The re-prefill covers prompt + every emitted output token (num_tokens), from a new
        prefix-cache lookup.
        """
        assert request.status is _RUNNING
        self.kv_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = ()
        request.num_preemptions += 1
        self.waiting.prepend(request)

    # -- output ----------------------------------------------------------------------------

    def _scheduled_requests(self, batch: _Batch) -> tuple[ScheduledRequest, ...]:
        steps = zip(batch.requests, batch.num_scheduled, batch.num_hit_tokens, strict=True)
        if not self._inline_steps or self.num_speculative_tokens:
            return tuple(self._scheduled_request(r, n, h) for r, n, h in steps)
        block_table = self.kv_manager.block_table
        make = make_scheduled_request
        out: list[ScheduledRequest] = []
        for request, num_new_tokens, num_hit in steps:  # _scheduled_request, inlined
            start = request.num_computed_tokens
            stop = start + num_new_tokens
            assert stop <= request.num_tokens
            out.append(
                make(
                    request.request_id,
                    start,
                    num_new_tokens,
                    request.num_tokens,
                    request.num_prompt_tokens,
                    request.readonly_tokens[start:stop],
                    block_table(request.request_id),
                    num_hit,
                )
            )
        return tuple(out)

    def _scheduled_request(
        self, request: Request, num_new_tokens: int, num_hit_tokens: int
    ) -> ScheduledRequest:
        num_computed_tokens = request.num_computed_tokens
        num_tokens = self._num_target_tokens(request)
        num_drafts = num_computed_tokens + num_new_tokens - num_tokens
        if request.spec_token_ids and num_drafts > 0:
            return self._scheduled_with_drafts(request, num_new_tokens, num_drafts)
        request.spec_token_ids = ()  # vLLM: new drafts come with the next proposal
        return make_scheduled_request(
            request.request_id,
            num_computed_tokens,
            num_new_tokens,
            num_tokens,
            request.num_prompt_tokens,
            request.token_view(num_computed_tokens, num_computed_tokens + num_new_tokens),
            self.kv_manager.block_table(request.request_id),
            num_hit_tokens,
        )

    def _scheduled_with_drafts(
        self, request: Request, num_new_tokens: int, num_drafts: int
    ) -> ScheduledRequest:
        """The request's last known tokens, then the `num_drafts` first drafts."""
        drafts, request.spec_token_ids = request.spec_token_ids[:num_drafts], ()
        start = request.num_computed_tokens
        known = request.token_view(start, request.num_tokens)
        token_ids = np.concatenate([known, np.asarray(drafts, dtype=np.int64)])
        token_ids.flags.writeable = False
        return ScheduledRequest(
            request_id=request.request_id,
            num_computed_tokens=start,
            num_scheduled_tokens=num_new_tokens,
            num_tokens=request.num_tokens,
            num_prompt_tokens=request.num_prompt_tokens,
            token_ids=token_ids,
            block_table=self.kv_manager.block_table(request.request_id),
            spec_token_ids=drafts,
        )

    # -- update ----------------------------------------------------------------------------

    def update_from_output(
        self,
        output: SchedulerOutput,
        sampled_token_ids: Mapping[str, int],
        accepted_token_ids: Mapping[str, tuple[int, ...]] | None = None,
    ) -> list[FinishedRequest]:
        """Apply one step; returns the requests finished since the previous update.
        `accepted_token_ids`: per request with drafts, the drafts the sampler accepted.

        A request's num_computed_tokens becomes the block manager's count once the step's
        blocks are cached (SGLang: len(prefix_indices)); a clean manager counts every token
        that ran.
        """
        finished = self._pending_finished
        self._pending_finished = []
        requests = self.requests
        cache_blocks = self.kv_manager.cache_blocks
        num_finished_running = 0
        for scheduled in output.scheduled:
            request = requests.get(scheduled.request_id)
            if request is None or request.status is not _RUNNING:
                continue  # aborted (or preempted) after this step was scheduled
            start = scheduled.num_computed_tokens
            assert request.num_computed_tokens == start
            if scheduled.spec_token_ids:
                if self._update_with_drafts(
                    request, scheduled, sampled_token_ids, accepted_token_ids or {}
                ):
                    finished.append(self._finish_stopped(request))
                    num_finished_running += 1
                continue
            num_end_tokens = start + scheduled.num_scheduled_tokens
            num_computed_tokens = cache_blocks(request, num_end_tokens)
            assert num_computed_tokens <= num_end_tokens, "a manager counts only what ran"
            request.num_computed_tokens = num_computed_tokens
            if num_end_tokens != scheduled.num_tokens:  # not scheduled.samples, inlined
                continue
            token_id = sampled_token_ids.get(scheduled.request_id)
            if token_id is None:
                raise ValueError(
                    f"step {output.step}: request {scheduled.request_id!r} samples this step "
                    "but sampled_token_ids has no token for it"
                )
            request.append_output_token(int(token_id))
            if request.num_output_tokens >= request.max_tokens or token_id == request.eos_token_id:
                finished.append(self._finish_stopped(request))
                num_finished_running += 1
        if num_finished_running:
            self.running = [r for r in self.running if r.status is _RUNNING]
        return finished

    def _finish_stopped(self, request: Request) -> FinishedRequest:
        """At its EOS ("stop") or max_tokens ("length"): its blocks freed."""
        reason = request.stop_reason()
        assert reason is not None, f"{request.request_id} has not stopped"
        request.status = _STOPPED[reason]
        self.kv_manager.free(request)
        return self._finish(request, reason)

    # -- speculative decoding --------------------------------------------------------------

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        """The drafter's proposals; kept for running requests whose last chunk reached
        num_tokens (vLLM ignores drafts of a request mid-prefill), at most
        num_speculative_tokens each."""
        k = self.num_speculative_tokens
        for rid, drafts in draft_token_ids.items():
            request = self.requests.get(rid)
            if request is None or request.status is not _RUNNING:
                continue
            if request.num_computed_tokens >= request.num_tokens - 1:
                request.spec_token_ids = tuple(int(t) for t in drafts[:k])

    def _update_with_drafts(
        self,
        request: Request,
        scheduled: ScheduledRequest,
        sampled_token_ids: Mapping[str, int],
        accepted_token_ids: Mapping[str, tuple[int, ...]],
    ) -> bool:
        """A step that ran drafts: append the accepted drafts and the bonus token (up to
        max_tokens or the EOS), roll num_computed_tokens back by the rejected drafts, then
        cache the full blocks of what is computed. Returns True when the request stopped::

            before    | computed | t | d1 d2 d3 |   num_end_tokens = n + 3 (n = num_tokens)
            accepted  d1              rejected d2 d3 (2)
            after     num_tokens n + 2 (d1, bonus), num_computed_tokens n + 1
        """
        rid = request.request_id
        token_id = sampled_token_ids.get(rid)
        if token_id is None:
            raise ValueError(f"request {rid!r} ran drafts but sampled_token_ids has no token")
        accepted = tuple(accepted_token_ids.get(rid, ()))
        num_rejected = len(scheduled.spec_token_ids) - len(accepted)
        assert num_rejected >= 0, f"{rid}: more accepted than drafted"
        request.append_outputs((*accepted, int(token_id)))
        num_end_tokens = scheduled.num_end_tokens
        num_computed_tokens = self._rolled_back(request, num_end_tokens, num_rejected)
        request.num_computed_tokens = self._cache_after_drafts(
            request, num_end_tokens, num_computed_tokens
        )
        return request.stop_reason() is not None

    def _rolled_back(self, request: Request, num_end_tokens: int, num_rejected: int) -> int:
        """num_computed_tokens after rejection sampling: the rejected drafts' KV is not
        computed (capped at num_tokens: drafts accepted past max_tokens were dropped)."""
        return min(num_end_tokens - num_rejected, request.num_tokens)

    def _cache_after_drafts(
        self, request: Request, num_end_tokens: int, num_computed_tokens: int
    ) -> int:
        """Cache the full blocks of [0, num_computed_tokens), after the rollback."""
        return self.kv_manager.cache_blocks(request, num_computed_tokens)

    # -- liveness --------------------------------------------------------------------------

    def waiting_reasons(self) -> dict[str, str]:
        """request id -> why it is not running now, from the last schedule()."""
        reasons: dict[str, str] = {}
        head_id = None
        for position, request in enumerate(self.waiting):
            prefix = f"preempted {request.num_preemptions}x; " if request.num_preemptions else ""
            if position == 0:
                head_id = request.request_id
                if self._head_reason is not None and self._head_reason[0] == head_id:
                    reason = self._head_reason[1]
                else:
                    reason = "head of the waiting queue, not tried since it got there"
            else:
                reason = f"queued behind {head_id!r} (position {position} of the waiting queue)"
            reasons[request.request_id] = prefix + reason
        for request in self.running:
            if request.num_computed_tokens >= request.num_tokens:
                reasons[request.request_id] = "running with nothing to compute"
        return reasons


class _Batch:
    """This step's scheduled requests in batch order, each with its chunk (num_scheduled)
    and prefix hit (num_hit_tokens), and the requests preempted while scheduling it."""

    __slots__ = ("num_hit_tokens", "num_scheduled", "preempted", "requests")

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.num_scheduled: list[int] = []
        self.num_hit_tokens: list[int] = []
        self.preempted: list[Request] = []

    def lists(self) -> tuple[list[Request], list[int], list[int]]:
        return self.requests, self.num_scheduled, self.num_hit_tokens

    def remove(self, victim: Request) -> int:
        """Drop a preempted request from the batch if it is in it; returns its tokens."""
        for position, request in enumerate(self.requests):
            if request is victim:
                del self.requests[position], self.num_hit_tokens[position]
                return self.num_scheduled.pop(position)
        return 0


_INLINED_STEPS = ("_num_target_tokens", "_chunk_running", "_scheduled_request")


def _overrides(scheduler: Scheduler, name: str) -> bool:
    return getattr(type(scheduler), name) is not getattr(Scheduler, name)


def _check_block_alignment(chunk_align: str, config: EngineConfig) -> None:
    """chunk_align "block" cuts a non-final chunk down to a block boundary: with a budget or
    a threshold under one block every long prompt's chunk would be empty, forever."""
    if chunk_align != "block":
        return
    limits = [("max_num_batched_tokens", config.max_num_batched_tokens)]
    if config.long_prefill_token_threshold:
        limits.append(("long_prefill_token_threshold", config.long_prefill_token_threshold))
    for name, value in limits:
        if value < config.block_size:
            raise ValueError(
                f'chunk_align "block" needs {name} >= block_size ({config.block_size}), got '
                f"{value}: a non-final chunk cut to a block boundary would be empty"
            )
