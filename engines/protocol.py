"""The one protocol every engine under test implements, and its boundary objects.

An engine under test is a scheduler plus a KV-cache block manager, driven step by step
with no model: the simulator adds and aborts requests, calls `schedule()`, derives the
runner metadata from the returned `SchedulerOutput` (see `metadata.py`), runs an
executor, and feeds the sampled tokens back through `update_from_output()`. Names follow
vLLM v1 (`vllm/v1/core/sched/output.py`) where we model vLLM.

Token layout of one scheduled request in one step::

    request tokens:  | computed (KV written) | this step's chunk  | not yet scheduled |
                     0            num_computed_tokens             |                   num_tokens
                                             |<- num_scheduled ->|
    block_table:     [b0][b1][b2]...  covers at least num_computed_tokens + num_scheduled_tokens
    slots (optional): s0 s1 s2 ......  one KV slot per token (SGLang's req_to_token row)

`num_computed_tokens` counts tokens whose KV is in the cache *before* the step, including
prefix-cache hits; `num_scheduled_tokens` counts the tokens run this step; `num_tokens` is the
number of tokens the request knows (prompt + emitted outputs) when the step is scheduled. The
request samples a token this step iff its chunk reaches `num_tokens`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

TokenArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """A request as handed to an engine: what a serving frontend would pass."""

    request_id: str
    prompt_token_ids: TokenArray  # int64, read-only
    max_tokens: int  # tokens to generate at most
    arrival_time_s: float = 0.0
    priority: int = 0  # lower value = more important (vLLM's convention)
    cache_salt: str | None = None  # an extra key of the block hash (vLLM's cache_salt)
    eos_token_id: int | None = None  # stops once sampled ("stop"); None: ignored (ignore_eos)
    # Optional: builds prompt_token_ids again (the same tokens, int64, read-only) whenever
    # called: an engine keeping thousands of requests waiting may keep no prompt until it
    # admits one (the reference engine). Not part of the request's value (equality, repr).
    prompt_source: Callable[[], TokenArray] | None = field(default=None, compare=False, repr=False)
    # A later turn's parent (vLLM's streaming-input sessions continue it); `continues`,
    # asked as the request finishes: does a later turn wait for it? (not part of its value)
    parent_request_id: str | None = None
    continues: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        assert self.prompt_token_ids.ndim == 1, "prompt_token_ids must be 1-D"
        assert self.prompt_token_ids.size >= 1, "a prompt has at least one token"
        assert self.max_tokens >= 1, "max_tokens >= 1"

    @property
    def num_prompt_tokens(self) -> int:
        return int(self.prompt_token_ids.size)


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """One request's share of one step (vLLM: NewRequestData / CachedRequestData)."""

    request_id: str
    num_computed_tokens: int  # before this step, prefix-cache hits included
    num_scheduled_tokens: int  # tokens run this step (>= 1)
    num_tokens: int  # tokens the request knows now: prompt + emitted outputs
    num_prompt_tokens: int
    token_ids: TokenArray  # the chunk: tokens [num_computed_tokens, +num_scheduled_tokens)
    block_table: tuple[int, ...]  # physical block ids, logical block i -> block_table[i]
    num_cached_tokens: int = 0  # prefix-cache hit length granted at (re)admission, else 0
    # The KV slot of each token [0, num_end_tokens), for engines that address KV per token
    # rather than per block (SGLang: the request's req_to_token row). When set, the kernels
    # write the chunk to slots[num_computed_tokens:num_end_tokens] and read keys through
    # slots (a block table of block size 1: see metadata.py); block_table then holds the
    # pages those slots lie in, for the token accounting.
    slots: tuple[int, ...] | None = None
    # speculative decoding (vLLM: scheduled_spec_decode_tokens): the draft tokens run this
    # step, the chunk's last len(spec_token_ids) tokens, at positions num_tokens, ...
    spec_token_ids: tuple[int, ...] = ()
    # hybrid KV cache: the block table of every KV-cache group, in EngineConfig.kv_groups
    # order (group 0's is block_table); () with one group
    group_block_tables: tuple[tuple[int, ...], ...] = ()

    @property
    def num_end_tokens(self) -> int:
        """Count of tokens with KV once this step ran: num_computed + num_scheduled."""
        return self.num_computed_tokens + self.num_scheduled_tokens

    @property
    def num_draft_tokens(self) -> int:
        return len(self.spec_token_ids)

    @property
    def samples(self) -> bool:
        """True iff this step produces a token for the request: its chunk reaches num_tokens
        (and then runs its drafts, if any, past it)."""
        return self.num_end_tokens - len(self.spec_token_ids) == self.num_tokens

    def group_table(self, group: int) -> tuple[int, ...]:
        """The block table of KV-cache group `group` (0: block_table)."""
        return self.group_block_tables[group] if self.group_block_tables else self.block_table


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """Everything one step runs; pure data, JSON-serializable (see `schedule_io.py`)."""

    step: int
    scheduled: tuple[ScheduledRequest, ...]  # in batch order
    preempted_req_ids: tuple[str, ...] = ()  # preempted while scheduling this step
    finished_req_ids: tuple[str, ...] = ()  # finished or aborted since the previous step
    rejected_req_ids: tuple[str, ...] = ()  # refused for good (can never fit), with reasons
    rejected_reasons: tuple[str, ...] = ()
    # (src, dst) block ids whose KV the worker copies before this step's forward
    # (copy-on-write of a shared last block: vLLM v0's blocks_to_copy, v1's
    # kv_cache_block_copies); an executor applies them before it writes or reads
    block_copies: tuple[tuple[int, int], ...] = ()
    # Requests the engine runs this step although they were aborted before it (SGLang: a
    # running request's abort takes effect after one more forward, "abort method 3"): the
    # simulator has retired them, but the kernels still write their chunk's KV, which the
    # radix tree may then keep and share. Each carries its slots (per-token engines only).
    discarded: tuple[ScheduledRequest, ...] = ()
    # Async scheduling: requests whose tokens sampled in the steps still in flight the
    # engine drops (vLLM: a reset preempted them between two steps, `drop_stale_output`);
    # each is also in preempted_req_ids, and its next chunks sample those positions again.
    dropped_req_ids: tuple[str, ...] = ()

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(r.num_scheduled_tokens for r in self.scheduled)


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    request_id: str
    output_token_ids: tuple[int, ...]
    reason: str  # "length", "stop" (EOS sampled), "abort" or "rejected: ..."


def hash_words_of(hashes: Sequence[bytes]) -> npt.NDArray[np.uint64] | None:
    """32-byte block hashes as rows of 4 little-endian words (`KVSnapshot.hash_words`'
    layout), or None where one is not 32 bytes long (the check in C)."""
    if not all(map((32).__eq__, map(len, hashes))):
        return None
    return np.frombuffer(b"".join(hashes), np.uint64).reshape(len(hashes), 4)


@runtime_checkable
class KVSnapshot(Protocol):
    """A read-only view of a block manager's state after a step, for the invariants.

    Methods rather than fields so that an engine can answer from its own structures without
    copying them every step; callers must not mutate what they get and must not keep it
    across a step.

    Optional members (read with getattr; an engine without them loses only what they unlock):

    num_evicted_blocks            property, int: cached blocks evicted for new allocations
                                  so far. Unlocks the `evict-cached-block` coverage count;
                                  without it a campaign lists that path as unmeasured.
    num_sliding_window_blocks_freed
                                  property, int: blocks a sliding-window group freed before
                                  a request's window. Unlocks `sliding-window-block-freed`.
    reserved_block_ids            ids of blocks no request holds by design (vLLM's null
                                  block): the pool check does not call them leaked.
    num_free_entries()            the free queue's own count of entries (vLLM's linked list
                                  keeps one): checked against the entries walked.
    hash_positions(hashes)        per hash, (request id, first position, end position) of
                                  the tokens it names, or None: unlocks
                                  `block-pool.cached-unwritten` by content (a freshly cached
                                  block must hold the KV of the tokens its hash names).
    take_changed_block_ids()      ids of blocks whose ref_cnt, free or cached state changed
                                  since the last call (a log the engine keeps): the pool
                                  check then looks at those blocks only, not the whole pool.
    take_rewritten_req_ids()      requests whose tables the engine rewrote in place since
                                  the last call (compared whole by the incremental check).
    block_table_views()           like block_tables(), without copies (the incremental check).
    idle_problems()               what the engine's own idle statement finds wrong once it
                                  runs nothing (SGLang: available + evictable != total, or
                                  slots still protected in the radix tree): each string is a
                                  `block-pool.idle-leak` (invariants/idle.py).
    ref_cnt_of(ids), is_free(ids), hash_of(ids)
                                  point lookups of ref_cnt, free state and block hash for
                                  some block ids (the incremental check; else full views).
    is_kept(ids)                  which of some blocks (no table holds them, no queue names
                                  them) the engine keeps itself, unhashed: SGLang's tree
                                  (the incremental check's leak property; else reserved).
    hash_changes_of(ids)          per block id, how many times its hash changed so far
                                  (cached, evicted, cached again): the incremental check
                                  then reads the hashes of the blocks whose count moved
                                  only. Every change must count, or it goes unchecked.
    pool_arrays()                 (ref_cnt, in the free queue, hash changes) of every block
                                  id, as the engine's own arrays (read-only views): the
                                  incremental check walks a step's changed blocks in one
                                  compiled call. They must say what ref_cnt_of, is_free
                                  and hash_changes_of say (the reference hashed manager).
    held_between_turns()          finished requests whose tables the engine keeps by design
                                  for a later turn (vLLM's streaming-input sessions): owners
                                  for the pool check, left out of the idle check.
    hash_words()                  (cached now, each block's hash as 4 little-endian words)
                                  of every block id, or None (a hash not 32 bytes long):
                                  with pool_arrays, the incremental check reads a step's new
                                  hashes as arrays; they must say what hash_of says.
    """

    @property
    def block_size(self) -> int: ...

    @property
    def num_blocks(self) -> int: ...

    def ref_cnt(self) -> npt.NDArray[np.int64]:
        """(num_blocks,) reference count of every block id."""
        ...

    def free_block_ids(self) -> Sequence[int] | npt.NDArray[np.int64]:
        """The free queue in eviction order (first = evicted first); an int64 array where
        the engine keeps it as one (no Python int per free block)."""
        ...

    def cached_blocks(self) -> Mapping[int, bytes]:
        """block id -> block hash, for every block whose content is in the prefix cache."""
        ...

    def block_tables(self) -> Mapping[str, Sequence[int]]:
        """request id -> block ids, for every request that holds blocks."""
        ...

    def num_computed_tokens(self) -> Mapping[str, int]:
        """request id -> the KV manager's own count of computed tokens (vllm#11186)."""
        ...


@runtime_checkable
class Engine(Protocol):
    """A scheduler + KV-cache manager under test.

    Optional: where `streams_chunks` is true, `stream_chunk(chunk) -> bool` takes a later
    turn's own input (`chunk.prompt_token_ids`) while its parent runs and queues it to
    continue the parent's session when the parent stops (True), or refuses it (the turn is
    added whole when the parent finishes). The turn is then added with its whole prompt
    (sim/arrivals.py)."""

    name: str

    def add_request(self, request: EngineRequest) -> None: ...

    def abort_request(self, request_id: str) -> None:
        """Abort a waiting or running request; unknown or finished ids are ignored."""
        ...

    def schedule(self) -> SchedulerOutput: ...

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> list[FinishedRequest]:
        """Apply a step's results; `sampled_token_ids` has one token per sampling request.

        An engine that schedules draft tokens (`SpecDecodeEngine`) also takes
        `accepted_token_ids`: per request with drafts, the drafts the rejection sampler
        accepted, which come before its sampled (bonus) token."""
        ...

    def kv_snapshot(self) -> KVSnapshot: ...

    def has_unfinished_requests(self) -> bool: ...

    def waiting_reasons(self) -> Mapping[str, str]:
        """request id -> why it is not running now (for liveness reports)."""
        ...


@runtime_checkable
class SpecDecodeEngine(Engine, Protocol):
    """An engine that schedules draft tokens (speculative decoding with acceptance).

    After each step the simulator's drafter proposes up to num_speculative_tokens drafts for
    every request that sampled (vLLM: EngineCore passes the runner's draft ids to
    `Scheduler.update_draft_token_ids`); the engine may schedule them next step
    (`ScheduledRequest.spec_token_ids`). The executor writes KV for every draft position,
    and accepts the longest prefix of drafts equal to what it samples at the rows before
    them, plus one bonus token; the engine rolls back num_computed_tokens by the drafts
    rejected::

        tokens:  | ... known ... t | d1 d2 d3 |      one step with K = 3 drafts
        rows:                  r0  r1 r2 r3        every row samples: s0 s1 s2 s3
        accept:  d1 == s0, d2 == s1, d3 != s2  ->  accepted (d1, d2), bonus s2
        after:   num_tokens += 3, num_computed_tokens = end - 1 (d3's KV is rejected)
    """

    def update_from_output(
        self,
        output: SchedulerOutput,
        sampled_token_ids: Mapping[str, int],
        accepted_token_ids: Mapping[str, tuple[int, ...]] = ...,
    ) -> list[FinishedRequest]: ...

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        """The drafts proposed for the next step, per request that just sampled."""
        ...


# Optional: an engine with a model runner of its own hands that runner's metadata per step
# (`runner_metadata(step)`, runner_metadata.RunnerMetadataEngine); the shadow KV then checks it.


@dataclass(frozen=True, slots=True)
class KVCacheGroup:
    """One KV-cache group: its layers' attention kind and, for a sliding window, W.

    A full-attention layer at position p reads keys [0, p]; a sliding-window layer reads
    exactly keys [p - W + 1, p] (vLLM's SlidingWindowSpec), so its manager frees blocks
    that fall wholly before every request's window."""

    kind: str  # "full" | "sliding"
    sliding_window: int = 0  # W (tokens), sliding only

    def __post_init__(self) -> None:
        assert self.kind in KV_GROUP_KINDS, self.kind
        assert (self.kind == "sliding") == (self.sliding_window >= 1), self

    @property
    def label(self) -> str:
        return "full" if self.kind == "full" else f"sliding:{self.sliding_window}"


KV_GROUP_KINDS = ("full", "sliding")


@functools.lru_cache(maxsize=64)  # a run asks some ten times; a campaign has a few specs
def parse_kv_groups(spec: str) -> tuple[KVCacheGroup, ...]:
    """`full`, `full,sliding:128`, ... -> groups; ValueError saying what is wrong.

    Group 0 is full attention (its table is ScheduledRequest.block_table); every later one
    is a sliding window of W >= 1 tokens. The groups are frozen: one tuple serves every
    config with the same spec."""
    groups: list[KVCacheGroup] = []
    for i, item in enumerate(spec.split(",")):
        kind, _, window = item.strip().partition(":")
        if kind == "full" and not window:
            groups.append(KVCacheGroup("full"))
        elif kind == "sliding" and window.isdigit() and int(window) >= 1:
            groups.append(KVCacheGroup("sliding", int(window)))
        else:
            raise ValueError(
                f"kv group {i} {item!r}: use 'full' or 'sliding:W' with an integer W >= 1"
            )
    if groups[0].kind != "full" or any(g.kind == "full" for g in groups[1:]):
        raise ValueError(f"kv groups {spec!r}: group 0 is 'full' and every later group sliding")
    return tuple(groups)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The engine options every engine understands (vLLM's names)."""

    block_size: int = 16
    num_gpu_blocks: int = 27_136  # Llama-3.1-8B on one H100 80GB (sim/deployment.py)
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 131_072
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0  # 0 = off
    # KV slots allocated past every request's scheduled tokens for speculative decoding's
    # draft KV (vLLM v1's Scheduler.num_lookahead_tokens = num_speculative_tokens); the
    # runner writes a draft entry into each after a request samples (vllm#16370)
    num_lookahead_tokens: int = 0
    # draft tokens scheduled per decoding request (vLLM's num_speculative_tokens), proposed
    # by the simulator's drafter and verified with acceptance (SpecDecodeEngine)
    num_speculative_tokens: int = 0
    # KV-cache groups (parse_kv_groups): "full", or "full,sliding:W" for a hybrid model
    kv_groups: str = "full"
    block_manager: str = "hashed"  # reference engine: hashed | radix; vLLM v0: v1 | v2
    mutant: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.block_size >= 1
        assert self.num_gpu_blocks >= 1
        assert self.max_num_batched_tokens >= 1
        assert self.max_num_seqs >= 1
        assert self.max_model_len >= 1
        assert self.long_prefill_token_threshold >= 0
        assert self.num_lookahead_tokens >= 0
        assert self.num_speculative_tokens >= 0

    @property
    def kv_cache_groups(self) -> tuple[KVCacheGroup, ...]:
        return parse_kv_groups(self.kv_groups)


# Async scheduling (vLLM's AsyncScheduler): a step is scheduled before the previous step's
# sampled tokens reach the engine, so a chunk may run a position whose token the engine
# does not know yet. An adapter puts this id there; the runner (the simulator's loop)
# fills in the token it sampled, as vLLM's model runner does from its previous step.
PLACEHOLDER_TOKEN_ID = -1
ASYNC_SCHEDULING_KEY = "async_scheduling"  # EngineConfig.extra: "true" = --async-scheduling


def is_async_scheduling(config: EngineConfig) -> bool:
    """Step N+1 is scheduled before step N's output reaches the engine (pipeline depth 2)."""
    return config.extra.get(ASYNC_SCHEDULING_KEY, "false") == "true"
