"""Scheduler mutants: subclasses of the clean `Scheduler` (engines/reference/scheduler.py),
each overriding the named step where the real bug was.

A step that the hot loops inline (`_num_target_tokens`, `_chunk_running`,
`_scheduled_request`) is run as a method once a subclass overrides it, so an override is
never bypassed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np

from schedcheck.engines.protocol import EngineConfig, ScheduledRequest
from schedcheck.engines.reference.block_hash import BlockHasher
from schedcheck.engines.reference.kv_manager import EMPTY_HIT, KVCacheManager, PrefixHit
from schedcheck.engines.reference.mutants.parts import EngineParts
from schedcheck.engines.reference.request import Request
from schedcheck.engines.reference.scheduler import Scheduler


class NoLookaheadSlots(Scheduler):
    """no-lookahead-slots (bug class 10, vllm#16370).

    Changes `Scheduler._num_lookahead`: the clean step returns
    ``min(num_lookahead_tokens, max_model_len - num_end_tokens)`` draft slots past each
    chunk; this one returns 0, so allocations cover computed + new tokens only and the
    drafter writes its draft KV past the end of the block table when the last block has
    fewer free slots than draft tokens (vLLM's scheduler left the lookahead slots out of
    `allocate_slots`).
    """

    def _num_lookahead(self, num_end_tokens: int) -> int:
        return 0


class StaleCacheHit(Scheduler):
    """stale-cache-hit (bug class 7, vllm#18957).

    Changes `_prefix_hit` (the clean step looks the prefix up again at every attempt) and
    `_allocate_waiting` (the clean step forgets a failed attempt): the hit found when a
    waiting request failed to get blocks is kept and reused at its next attempt without a
    new lookup, even if those blocks were evicted and handed to another request meanwhile.
    vLLM kept `num_computed_tokens` from the failed attempt on the request.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # Scheduler's arguments
        super().__init__(*args, **kwargs)
        self._stale_hits: dict[Request, PrefixHit] = {}  # looked up, never iterated

    def _prefix_hit(self, request: Request) -> PrefixHit:
        stale = self._stale_hits.get(request)
        return stale if stale is not None else super()._prefix_hit(request)

    def _allocate_waiting(self, request: Request, num_new_tokens: int, hit: PrefixHit) -> bool:
        allocated = super()._allocate_waiting(request, num_new_tokens, hit)
        if allocated:
            self._stale_hits.pop(request, None)
        else:
            self._stale_hits[request] = hit  # the bug: kept for the next attempt
        return allocated


class ResumeDropsLastToken(Scheduler):
    """resume-drops-last-token (bug class 11, vllm#28787).

    Changes `_num_target_tokens` (clean: ``request.num_tokens``, prompt + every output):
    after a recompute preemption of a request with outputs, and until it samples again, the
    re-prefill covers every token but the last output, and the runner sees the request
    without it (ScheduledRequest.num_tokens), so it samples as if that token did not exist.
    `_preempt` records the request's num_tokens at preemption (the clean step records
    nothing); `_prefix_hit` drops a hit that covers the shortened target (the clean hit is
    capped below num_tokens, one token short of this target).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # Scheduler's arguments
        super().__init__(*args, **kwargs)
        # request -> its num_tokens when preempted; stale once it samples (num_tokens grows)
        self._num_tokens_at_preemption: dict[Request, int] = {}  # looked up, never iterated

    def _num_target_tokens(self, request: Request) -> int:
        num_tokens = request.num_tokens
        if self._num_tokens_at_preemption.get(request) == num_tokens:
            return num_tokens - 1  # the bug: the last output token is left out
        return num_tokens

    def _preempt(self, request: Request) -> None:
        super()._preempt(request)
        if request.num_output_tokens > 0:
            self._num_tokens_at_preemption[request] = request.num_tokens

    def _prefix_hit(self, request: Request) -> PrefixHit:
        hit = super()._prefix_hit(request)
        return EMPTY_HIT if hit.num_tokens >= self._num_target_tokens(request) else hit


class ChunkBeforePrefixHit(Scheduler):
    """chunk-before-prefix-hit (bug class 17, nano-vllm 77dd709).

    Changes `_chunk_waiting`: the clean step sizes the first chunk from the end of the prefix
    hit, ``num_tokens - hit.num_tokens``; this one sizes it from the request's own
    num_computed_tokens (0), before the hit is applied, and does not align it. With a hit
    the chunk runs past num_tokens and past the block table.

    Three more overrides let the engine run on so that the invariants see the bug:
    `_allocate_waiting` allocates what the request really needs (as nano-vllm did), the
    output pads the chunk's tokens past num_tokens with -1, and the step's blocks are cached
    up to num_tokens only (the over-long chunk never samples: it ends past num_tokens).
    """

    def __init__(
        self,
        config: EngineConfig,
        kv_manager: KVCacheManager,
        hasher: BlockHasher,
        *,
        policy: str = "fcfs",
        chunk_align: str = "none",
    ) -> None:
        super().__init__(
            config,
            cast(KVCacheManager, _CachesUpToNumTokens(kv_manager)),  # forwards the rest
            hasher,
            policy=policy,
            chunk_align=chunk_align,
        )

    def _chunk_waiting(self, request: Request, hit: PrefixHit, token_budget: int) -> int:
        num_new_tokens = request.num_tokens - request.num_computed_tokens  # the bug
        num_new_tokens = self._cap_long_prefill(num_new_tokens)
        if not self._fits_unchunked(request, num_new_tokens, token_budget):
            return 0
        return min(num_new_tokens, token_budget)

    def _allocate_waiting(self, request: Request, num_new_tokens: int, hit: PrefixHit) -> bool:
        num_needed_tokens = request.num_tokens - hit.num_tokens
        return super()._allocate_waiting(request, min(num_new_tokens, num_needed_tokens), hit)

    def _scheduled_request(
        self, request: Request, num_new_tokens: int, num_hit_tokens: int
    ) -> ScheduledRequest:
        start = request.num_computed_tokens
        num_known_tokens = min(num_new_tokens, request.num_tokens - start)
        scheduled = super()._scheduled_request(request, num_known_tokens, num_hit_tokens)
        if num_known_tokens == num_new_tokens:
            return scheduled
        padded = np.full(num_new_tokens, -1, dtype=np.int64)
        padded[:num_known_tokens] = scheduled.token_ids
        padded.flags.writeable = False
        return dataclasses.replace(scheduled, num_scheduled_tokens=num_new_tokens, token_ids=padded)


class _CachesUpToNumTokens:
    """The block manager as ChunkBeforePrefixHit's scheduler sees it: `cache_blocks` of a
    chunk that ran past num_tokens caches (and counts) up to num_tokens only."""

    def __init__(self, kv_manager: KVCacheManager) -> None:
        self._kv_manager = kv_manager

    def __getattr__(self, name: str) -> object:
        return getattr(self._kv_manager, name)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        return self._kv_manager.cache_blocks(request, min(num_computed_tokens, request.num_tokens))


class NeverReject(Scheduler):
    """never-reject (bug class 18, vllm#39734 / vllm#45387).

    Changes `_too_many_blocks_reason`: the clean step rejects, at add_request, a request
    that needs more KV blocks than the whole cache has; this one never does, so the request
    is queued and blocks the head of the waiting queue forever.
    """

    def _too_many_blocks_reason(self, request: Request) -> str | None:
        return None


class SpecRollbackOffByOne(Scheduler):
    """spec-rollback-off-by-one (bug classes 1 and 10; vLLM v1 rolls num_computed_tokens back by
    the rejected drafts in `update_from_output`).

    Changes `_rolled_back`: the clean step sets num_computed_tokens to the scheduled end
    minus the rejected drafts (the first rejected position is recomputed, holding the bonus
    token); this one stops one token short whenever a draft was rejected, so the bonus
    token's position counts as computed while its slot holds the rejected draft's KV.
    """

    def _rolled_back(self, request: Request, num_end_tokens: int, num_rejected: int) -> int:
        num_computed_tokens = super()._rolled_back(request, num_end_tokens, num_rejected)
        return num_computed_tokens + 1 if num_rejected else num_computed_tokens  # the bug


class CacheRejectedDraftBlock(Scheduler):
    """cache-rejected-draft-block (bug classes 3 and 10; vLLM v1's allocate_slots caches at most
    request.num_tokens, drafts excluded).

    Changes `_cache_after_drafts`: the clean step caches the full blocks of the rolled-back
    num_computed_tokens; this one first caches up to the scheduled end capped at the tokens
    the request knows after the step, i.e. through the bonus token's position, whose slot
    holds the first rejected draft's KV: that block enters the prefix cache under the hash
    of the true tokens. The manager's count is then set back, so the scheduler and the
    manager still agree.
    """

    def _cache_after_drafts(
        self, request: Request, num_end_tokens: int, num_computed_tokens: int
    ) -> int:
        self.kv_manager.cache_blocks(request, min(num_end_tokens, request.num_tokens))  # bug
        return super()._cache_after_drafts(request, num_end_tokens, num_computed_tokens)


PARTS: dict[str, EngineParts] = {
    "no-lookahead-slots": EngineParts(scheduler=NoLookaheadSlots),
    "stale-cache-hit": EngineParts(scheduler=StaleCacheHit),
    "resume-drops-last-token": EngineParts(scheduler=ResumeDropsLastToken),
    "chunk-before-prefix-hit": EngineParts(scheduler=ChunkBeforePrefixHit),
    "never-reject": EngineParts(scheduler=NeverReject),
    "spec-rollback-off-by-one": EngineParts(scheduler=SpecRollbackOffByOne),
    "cache-rejected-draft-block": EngineParts(scheduler=CacheRejectedDraftBlock),
}
