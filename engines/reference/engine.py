"""The reference engine: our scheduler + one of two block managers, behind `protocol.Engine`.

Options (EngineConfig, vLLM's names) plus these keys of `EngineConfig.extra`:

- "policy": "fcfs" (default) or "priority" (lower priority value = more important);
- "chunk_align": "none" (default, vLLM v1), "block" or "deterministic" (see chunking.py);
- "page_size": radix only; must equal block_size (a page is the run's block, so the same
  runner metadata works); default block_size. block_size 1 = token granularity.

`block_manager` is "hashed" (vLLM v1's KVCacheManager + BlockPool) or "radix" (SGLang's
RadixCache). `mutant` names an entry of the catalog (mutants/catalog.py; None = clean): an
engine mutant builds the engine from its subclasses of the clean classes (mutants/).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from schedcheck.engines.capabilities import Capabilities, declare
from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    KVSnapshot,
    SchedulerOutput,
    is_async_scheduling,
)
from schedcheck.engines.reference.async_scheduling import async_of
from schedcheck.engines.reference.chunking import CHUNK_ALIGN_MODES
from schedcheck.engines.reference.kv_manager import KVCacheManager
from schedcheck.engines.reference.mutants import EngineParts, engine_parts
from schedcheck.engines.reference.request_queue import POLICIES

BLOCK_MANAGERS = ("hashed", "radix")


def make_kv_manager(config: EngineConfig, parts: EngineParts) -> KVCacheManager:
    if config.block_manager == "hashed":
        return parts.hashed(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
    if config.block_manager == "radix":
        page_size = int(config.extra.get("page_size", config.block_size))
        if page_size != config.block_size:
            raise ValueError(
                f"radix page_size {page_size} != block_size {config.block_size}: a page is "
                "the run's block, set block_size to the page size"
            )
        return parts.radix(config.num_gpu_blocks, page_size, config.enable_prefix_caching)
    raise ValueError(
        f"unknown block_manager {config.block_manager!r} for the reference engine: "
        f"use one of {', '.join(BLOCK_MANAGERS)}"
    )


class ReferenceEngine:
    """Implements `schedcheck.engines.protocol.Engine`."""

    name = "reference"
    supports_async_scheduling = True  # --async-scheduling: async_scheduling.py

    def __init__(self, config: EngineConfig) -> None:
        if len(config.kv_cache_groups) > 1:
            raise ValueError(
                f"kv_groups {config.kv_groups!r}: the reference engine has one full-attention "
                "KV-cache group (it does not model sliding-window managers; use vllm-v1)"
            )
        self.config = config
        parts = engine_parts(config.mutant, config.block_manager)  # clean classes if None
        hasher = parts.hasher(config.block_size)
        self.kv_manager = make_kv_manager(config, parts)
        scheduler_cls = parts.scheduler
        self.is_async = is_async_scheduling(config)
        if self.is_async:
            if config.num_speculative_tokens:
                raise ValueError(
                    f"num_speculative_tokens={config.num_speculative_tokens} with async "
                    "scheduling: the reference engine does not schedule drafts optimistically "
                    "(use --engine vllm-v1)"
                )
            scheduler_cls = async_of(scheduler_cls)
        self.scheduler = scheduler_cls(
            config,
            self.kv_manager,
            hasher,
            policy=config.extra.get("policy", "fcfs"),
            chunk_align=config.extra.get("chunk_align", "none"),
        )

    def add_request(self, request: EngineRequest) -> None:
        self.scheduler.add_request(request)

    def abort_request(self, request_id: str) -> None:
        self.scheduler.abort_request(request_id)

    def schedule(self) -> SchedulerOutput:
        return self.scheduler.schedule()

    def update_from_output(
        self,
        output: SchedulerOutput,
        sampled_token_ids: Mapping[str, int],
        accepted_token_ids: Mapping[str, tuple[int, ...]] | None = None,
    ) -> list[FinishedRequest]:
        return self.scheduler.update_from_output(output, sampled_token_ids, accepted_token_ids)

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        """Speculative decoding: the drafter's proposals for the next step."""
        self.scheduler.update_draft_token_ids(draft_token_ids)

    def kv_snapshot(self) -> KVSnapshot:
        snapshot = self.kv_manager.kv_snapshot()
        if self.is_async:  # vLLM's count: scheduled, not only applied
            return self.scheduler.kv_snapshot_of(snapshot)  # type: ignore[attr-defined]
        return snapshot

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def waiting_reasons(self) -> Mapping[str, str]:
        return self.scheduler.waiting_reasons()

    def inject_fault(self, kind: str, rng: np.random.Generator) -> str | None:
        """Fault points of sim/faults.py: preempt, evict, reduced-budget (None: not applied)."""
        if kind == "preempt":
            return self.scheduler.force_preempt(int(rng.integers(1 << 30)))
        if kind == "evict":
            evicted = self.kv_manager.evict_cached_free(int(rng.integers(1, 65)))
            return f"evicted {evicted} cached blocks" if evicted else None
        if kind == "reduced-budget":
            budget = self.config.max_num_batched_tokens
            return self.scheduler.reduce_next_budget(int(rng.integers(1, budget + 1)))
        return None


CAPABILITIES = Capabilities(
    block_managers=BLOCK_MANAGERS,
    extra_options=(("chunk_align", CHUNK_ALIGN_MODES), ("policy", POLICIES)),
    kv_of_last_token=False,  # the last sampled token is never run, so it has no KV
)


@declare(CAPABILITIES)
def make_engine(config: EngineConfig) -> ReferenceEngine:
    return ReferenceEngine(config)
