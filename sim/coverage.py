"""Rare paths, counted as "sometimes" assertions: a campaign that never reaches one of these
has not tested what the bug classes of docs/bug-classes.md say breaks. Counted from the
schedule alone (plus the engine's optional `num_evicted_blocks` counter on its KV snapshot),
so any engine can be measured.

    fully-cached-prompt            admitted with every full block of its tokens a cache hit
    same-prefix-same-step          two requests of one step share their first block, and
                                   one of them computes it in that step (vllm#7822)
    preempt-during-chunked-prefill-with-prefix-hit
                                   preempted mid-prefill after an admission with a cache hit
    abort-mid-chunk                aborted between two chunks of its prefill
    evict-cached-block             cached blocks were evicted for new allocations
    drafts-cross-block             a sampling request's draft tokens (speculative decoding)
                                   do not fit the free slots of its last block (vllm#16370)
    spec-rejected                  a scheduled draft token was rejected (the request's
                                   num_computed_tokens rolls back over draft KV)
    spec-rejected-cross-block      the rejected drafts' positions span a block boundary:
                                   a block holds only rejected-draft KV after the step
    sliding-window-block-freed     a sliding-window KV-cache group freed blocks before a
                                   request's window (the engine's snapshot counts them)

vLLM v1 scheduler options (VLLM_OPTION_PATHS: only an engine with those options reaches them):

    preempt-scheduled-same-step    a request preempted by the schedule() call that had
                                   scheduled it (priority policy; the adapter counts it)
    async-output-placeholder       async scheduling: a chunk ran a position whose token the
                                   engine did not know yet (the previous step's sample)
    queue-full-rejection           refused at admission by max_num_queued_reqs / _tokens
    cache-aware-reorder            cache_aware_admission_window moved a waiting request with a
                                   cached prefix ahead of earlier arrivals (vLLM 0.34.0 on;
                                   RELEASE_PATHS: reachable only where the engine counts it)
    reset-with-step-in-flight      a fault's cache reset preempted the running requests with
                                   a step in flight: vLLM drops its stale output and may resume
                                   them in the next step (async scheduling; FAULT_PATHS)
    engine-paused                  a fault paused the engine (PAUSED_ALL or PAUSED_NEW) and
                                   its pause settled: drained, reset, resumed (FAULT_PATHS)
    session-resumed                a later turn continued its parent's streaming-input
                                   session, KV kept between turns (0.34.0 on, with the
                                   option: engines/vllm/v1/sessions.py; RELEASE_PATHS)
    session-chunk-queued           a later turn's input, sent while its parent ran, queued
                                   in the session and run at the parent's stop (the option
                                   "queued"; RELEASE_PATHS)

The model's EOS (SimOptions.eos_token_id; EOS_PATHS: only a campaign that draws it):

    eos-stop                       a request stopped at the EOS it sampled (reason "stop")

SGLang (counted by the adapter; ENGINE_PATHS):

    retract-with-token-in-flight   overlap scheduling: a request retracted while a batch in
                                   flight samples its token, which SGLang's result skips
                                   (the output's dropped_req_ids)
    mixed-chunk-step               --enable-mixed-chunk: a prefill batch ran with the
                                   running decodes in one forward (ForwardMode.MIXED)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from schedcheck.engines.protocol import FinishedRequest, ScheduledRequest, SchedulerOutput

RARE_PATHS = (
    "fully-cached-prompt",
    "same-prefix-same-step",
    "preempt-during-chunked-prefill-with-prefix-hit",
    "abort-mid-chunk",
    "evict-cached-block",
    "drafts-cross-block",
    "spec-rejected",
    "spec-rejected-cross-block",
    "sliding-window-block-freed",
    "preempt-scheduled-same-step",
    "async-output-placeholder",
    "queue-full-rejection",
    "cache-aware-reorder",
    "reset-with-step-in-flight",
    "engine-paused",
    "retract-with-token-in-flight",
    "mixed-chunk-step",
    "session-resumed",
    "session-chunk-queued",
    "eos-stop",
)
# vLLM's fault points (engines/vllm/v1/faults.py): only where faults are drawn
FAULT_PATHS = ("reset-with-step-in-flight", "engine-paused")
VLLM_OPTION_PATHS = (
    "preempt-scheduled-same-step",
    "async-output-placeholder",
    "queue-full-rejection",
    "cache-aware-reorder",
    *FAULT_PATHS,
)
# paths of a feature only some engines or releases have: reachable only where the engine's
# rare_path_counts() names them
ENGINE_PATHS = ("retract-with-token-in-flight", "mixed-chunk-step")  # SGLang's
# paths only async scheduling reaches (vLLM's AsyncScheduler, SGLang's overlap scheduling)
ASYNC_PATHS = ("async-output-placeholder", "retract-with-token-in-flight")
SESSION_PATHS = ("session-resumed", "session-chunk-queued")  # vLLM's streaming input
RELEASE_PATHS = ("cache-aware-reorder", *FAULT_PATHS, *ENGINE_PATHS, *SESSION_PATHS)
SPEC_PATHS = ("spec-rejected", "spec-rejected-cross-block")
EOS_PATHS = ("eos-stop",)
SLIDING_PATHS = ("sliding-window-block-freed",)


@runtime_checkable
class RarePathCounter(Protocol):
    def rare_path_counts(self) -> Mapping[str, int]:
        """Rare paths of the engine's own code reached so far (the engine's own counts)."""
        ...


class Prompted(Protocol):
    """What coverage reads of a live request (an EngineRequest, or the ledger's own)."""

    @property
    def num_prompt_tokens(self) -> int: ...

    @property
    def prompt_token_ids(self) -> np.ndarray: ...


class Coverage:
    def __init__(self, block_size: int, num_lookahead_tokens: int = 0) -> None:
        self.block_size = block_size
        self.num_lookahead_tokens = num_lookahead_tokens
        self.counts: dict[str, int] = dict.fromkeys(RARE_PATHS, 0)
        self.mid_prefill: set[str] = set()  # last chunk did not reach num_tokens
        self.admitted_with_hit: set[str] = set()
        self.scheduled_before: set[str] = set()
        self.first_block_key: dict[str, bytes] = {}  # request id -> its first block's tokens

    def observe_step(self, output: SchedulerOutput, live: Mapping[str, Prompted]) -> None:
        bs = self.block_size
        for rid in output.preempted_req_ids:
            if rid in self.mid_prefill and rid in self.admitted_with_hit:
                self.counts["preempt-during-chunked-prefill-with-prefix-hit"] += 1
            self.scheduled_before.discard(rid)
            self.mid_prefill.discard(rid)
        computing = False  # a request computes its first block this step
        for r in output.scheduled:
            rid = r.request_id
            if rid not in self.scheduled_before:
                self._admitted(rid, r.num_cached_tokens, r.num_tokens)
            num_end_tokens = r.num_computed_tokens + r.num_scheduled_tokens
            if num_end_tokens < r.num_tokens:
                self.mid_prefill.add(rid)
            else:
                self.mid_prefill.discard(rid)
                if self.num_lookahead_tokens > -num_end_tokens % bs:  # free slots of its block
                    self.counts["drafts-cross-block"] += 1
            computing = computing or r.num_computed_tokens < bs
        if computing and self._same_prefix_same_step(output, live):
            self.counts["same-prefix-same-step"] += 1

    def _same_prefix_same_step(self, output: SchedulerOutput, live: Mapping[str, Prompted]) -> bool:
        """Two requests of the step share their first block's tokens, and one of them
        computes it (only then can both compute it at once)."""
        bs = self.block_size
        first_blocks: dict[bytes, bool] = {}  # first-block tokens -> computed in this step
        shared = False
        keys = self.first_block_key
        for r in output.scheduled:
            rid = r.request_id
            key = keys.get(rid)
            if key is None:
                request = live.get(rid)
                if request is None or request.num_prompt_tokens < bs:
                    continue
                key = keys[rid] = request.prompt_token_ids[:bs].tobytes()
            computing = r.num_computed_tokens < bs
            if key in first_blocks and (computing or first_blocks[key]):
                shared = True
            first_blocks[key] = first_blocks.get(key, False) or computing
        return shared

    def _admitted(self, rid: str, num_cached_tokens: int, num_tokens: int) -> None:
        self.scheduled_before.add(rid)
        if num_cached_tokens > 0:
            self.admitted_with_hit.add(rid)
            full = (num_tokens - 1) // self.block_size * self.block_size
            if num_cached_tokens >= full:
                self.counts["fully-cached-prompt"] += 1

    def observe_abort(self, rid: str) -> None:
        if rid in self.mid_prefill:
            self.counts["abort-mid-chunk"] += 1

    def observe_finished(self, finished: Collection[FinishedRequest]) -> None:
        for f in finished:  # bounded: the step's finished requests
            if f.reason == "stop":
                self.counts["eos-stop"] += 1

    def forget(self, rid: str) -> None:
        self.first_block_key.pop(rid, None)
        self.mid_prefill.discard(rid)
        self.admitted_with_hit.discard(rid)
        self.scheduled_before.discard(rid)

    def observe_snapshot(self, snapshot: object) -> None:
        """The paths a KV snapshot counts itself, where it has the counters (optional
        members of KVSnapshot: num_evicted_blocks, num_sliding_window_blocks_freed)."""
        for path, name in (
            ("evict-cached-block", "num_evicted_blocks"),
            ("sliding-window-block-freed", "num_sliding_window_blocks_freed"),
        ):
            count = getattr(snapshot, name, None)
            if count is not None:
                self.counts[path] = int(count)

    def observe_acceptance(self, scheduled: ScheduledRequest, num_accepted: int) -> None:
        """A step's rejection sampling of one request with drafts::

        positions   n-1 | n ... n+a-1 | n+a ... n+K-1     n = num_tokens
                         accepted       rejected           a = num_accepted
        """
        num_drafts = scheduled.num_draft_tokens
        if num_accepted >= num_drafts:
            return
        self.counts["spec-rejected"] += 1
        first_rejected = scheduled.num_tokens + num_accepted
        last = scheduled.num_end_tokens - 1
        if first_rejected // self.block_size != last // self.block_size:
            self.counts["spec-rejected-cross-block"] += 1

    def observe_engine_paths(self, counts: Mapping[str, int]) -> None:
        """Rare paths the engine counted itself (e.g. vllm-v1's rare_path_counts())."""
        for path, count in counts.items():
            if path in self.counts:
                self.counts[path] = int(count)

    def mid_prefill_ids(self) -> list[str]:
        return sorted(self.mid_prefill)


PREFIX_CACHE_PATHS = (
    "fully-cached-prompt",
    "preempt-during-chunked-prefill-with-prefix-hit",
    "evict-cached-block",
)


def never_reached(
    counts: Mapping[str, int],
    *,
    drafts: bool = True,
    prefix_caching: bool = True,
    vllm_options: bool = True,
    async_scheduling: bool | None = None,
    spec: bool = False,
    sliding: bool = False,
    aborts: bool = True,
    evictions_counted: bool = True,
    engine_paths: Collection[str] = RELEASE_PATHS,
    eos: bool = False,
) -> list[str]:
    """Rare paths with a zero count, of those the campaign can reach: one that never draws
    draft tokens cannot reach drafts-cross-block, one without prefix caching none of
    PREFIX_CACHE_PATHS, one that never draws vLLM v1's scheduler options (priority, async
    scheduling, queue limits) none of VLLM_OPTION_PATHS, so they are not listed, but
    ASYNC_PATHS follow `async_scheduling` (the campaign draws it; None: as `vllm_options`;
    SGLang's overlap scheduling reaches them too);
    SPEC_PATHS and SLIDING_PATHS only for a campaign that draws scheduled drafts (`spec`)
    or a sliding-window group (`sliding`); abort-mid-chunk only for an engine that declares
    aborts; evict-cached-block only where the engine's snapshot counts its evictions (the
    optional `num_evicted_blocks`: without it the path is unmeasured, not unreached);
    RELEASE_PATHS only where `engine_paths` (the engine's rare_path_counts() keys) names
    them; EOS_PATHS only for a campaign that draws the model's EOS (`eos`)."""
    unreachable: tuple[str, ...] = () if drafts else ("drafts-cross-block",)
    if not prefix_caching:
        unreachable += PREFIX_CACHE_PATHS
    if not vllm_options:
        unreachable += tuple(p for p in VLLM_OPTION_PATHS if p not in ASYNC_PATHS)
    if not (vllm_options if async_scheduling is None else async_scheduling):
        unreachable += ASYNC_PATHS
    if not spec:
        unreachable += SPEC_PATHS
    if not sliding:
        unreachable += SLIDING_PATHS
    if not aborts:
        unreachable += ("abort-mid-chunk",)
    if not eos:
        unreachable += EOS_PATHS
    if not evictions_counted:
        unreachable += ("evict-cached-block",)
    unreachable += tuple(p for p in RELEASE_PATHS if p not in engine_paths)
    paths = (p for p in RARE_PATHS if p not in unreachable)
    return [path for path in paths if counts.get(path, 0) == 0]


def merge(*counts: Mapping[str, int]) -> dict[str, int]:
    total = dict.fromkeys(RARE_PATHS, 0)
    for c in counts:
        for path in RARE_PATHS:
            total[path] += int(c.get(path, 0))
    return total
