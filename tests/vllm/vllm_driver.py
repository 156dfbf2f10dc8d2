"""A minimal driver loop for the vLLM adapter tests: add -> schedule -> tokens -> update.

Stand-in tokens are a fixed function of (step, request id) so every run is identical; the
snapshot check is the block-pool accounting every engine must satisfy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import pytest

from schedcheck.engines.protocol import (
    Engine,
    EngineRequest,
    FinishedRequest,
    KVSnapshot,
    ScheduledRequest,
    SchedulerOutput,
)
from schedcheck.engines.vllm.v1.eras import (
    NEWEST,
    SUPPORTED_RANGE,
    installed_release,
    release_key,
    unsupported_reason,
)

TOKEN_BASE = 1000


def vllm_version() -> str | None:
    """The installed vLLM's version, or None (read from its metadata, under either of its
    distribution names: importing it is slow)."""
    return installed_release()


HAS_V1 = unsupported_reason(vllm_version()) is None
# the marks of a module of tests against any v1 release the adapter drives (the vllm-v1
# tox env is the newest release; vllm-v1-RELEASE each one)
NEEDS_VLLM_V1 = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not HAS_V1,
        reason=f"needs a vLLM v1 release {SUPPORTED_RANGE} (tox -e vllm-v1, vllm-v1-RELEASE)",
    ),
]


def needs_release(first: str, feature: str) -> pytest.MarkDecorator:
    """Skip where the installed release predates `first`, the release that has `feature`."""
    version = vllm_version()
    older = version is not None and release_key(version) < release_key(first)
    return pytest.mark.skipif(older, reason=f"{feature}: vLLM {first} on (installed {version})")


def needs_options(*names: str) -> pytest.MarkDecorator:
    """Skip where the installed release's SchedulerConfig lacks one of these fields."""
    from schedcheck.engines.vllm.v1.eras import scheduler_config_fields

    fields = scheduler_config_fields() if HAS_V1 else frozenset(names)
    missing = [n for n in names if n not in fields]
    return pytest.mark.skipif(
        bool(missing),
        reason=f"SchedulerConfig.{', '.join(missing)}: absent in vLLM {vllm_version()} "
        f"(present in {NEWEST})",
    )


def skip_unless_drafts(async_scheduling: bool = False) -> None:
    """Skip where the release cannot take our drafts: before 0.11.0 (no
    update_draft_token_ids: drafts came in ModelRunnerOutput.spec_token_ids), or with async
    scheduling where it refuses n-gram drafts (0.12.0: "only supported with EAGLE/MTP").
    The fuzzer's fit_config turns the drafts off there."""
    from schedcheck.engines.vllm.v1.adapter import make_engine
    from schedcheck.engines.vllm.v1.eras import async_drafts_accepted, has_draft_token_ids_api

    if not has_draft_token_ids_api():
        pytest.skip(f"vLLM {vllm_version()} has no update_draft_token_ids (0.11.0 on)")
    if async_scheduling and not async_drafts_accepted(make_engine):
        pytest.skip(f"vLLM {vllm_version()} refuses async scheduling with n-gram drafts")


def frees_unhashed_blocks_to_the_head() -> bool:
    """0.2x on: BlockPool.free_blocks prepends unhashed blocks (FreeKVCacheBlockQueue has
    prepend_n); before, every freed block goes to the tail."""
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

    return hasattr(FreeKVCacheBlockQueue, "prepend_n")


def request(rid: str, prompt: Iterable[int], max_tokens: int) -> EngineRequest:
    arr = np.asarray(list(prompt), dtype=np.int64)
    arr.flags.writeable = False
    return EngineRequest(request_id=rid, prompt_token_ids=arr, max_tokens=max_tokens)


def stand_in_token(step: int, rid: str) -> int:
    """Deterministic stand-in for a sampled token (no hash() of strings)."""
    return TOKEN_BASE + 10 * step + sum(rid.encode())


@dataclass
class StepRecord:
    output: SchedulerOutput
    finished: list[FinishedRequest]
    snapshot_ok: bool = True
    tables: dict[str, tuple[int, ...]] = field(default_factory=dict)


def run_step(engine: Engine, before_update: Callable[[SchedulerOutput], None] | None = None):
    """One step; the runner tables must equal the manager's right after schedule()."""
    out = engine.schedule()
    manager_tables = engine.kv_snapshot().block_tables()
    for r in out.scheduled:
        assert tuple(manager_tables[r.request_id]) == r.block_table, r.request_id
    check_request_shape(out.scheduled)
    if before_update is not None:
        before_update(out)
    tokens = {r.request_id: stand_in_token(out.step, r.request_id) for r in out.scheduled}
    live = {r.request_id for r in out.scheduled if r.samples}
    finished: list[FinishedRequest] = []
    if out.scheduled:  # as the simulator's loop: an empty step gets no update call
        finished = engine.update_from_output(out, {k: v for k, v in tokens.items() if k in live})
    check_snapshot(engine.kv_snapshot())
    return StepRecord(out, finished, tables={r.request_id: r.block_table for r in out.scheduled})


def check_request_shape(scheduled: Iterable[ScheduledRequest]) -> None:
    for r in scheduled:
        assert r.num_scheduled_tokens >= 1
        assert r.token_ids.size == r.num_scheduled_tokens
        assert r.num_end_tokens <= r.num_tokens
        assert all(isinstance(b, int) for b in r.block_table)


def check_snapshot(snap: KVSnapshot) -> None:
    """free + used == all blocks; ref_cnt == references from block tables (reserved aside)."""
    n = snap.num_blocks
    ref = snap.ref_cnt()
    assert ref.shape == (n,)
    free = list(snap.free_block_ids())
    assert len(set(free)) == len(free), "a block twice in the free queue"
    used = {b for b in range(n) if ref[b] > 0}
    assert not used & set(free), "a referenced block is free"
    assert len(used) + len(free) == n, (len(used), len(free), n)
    reserved = set(snap.reserved_block_ids)
    refs = Counter(b for table in snap.block_tables().values() for b in table)
    assert not reserved & set(refs), "a reserved block in a request's table"
    for b in range(n):
        if b not in reserved:
            assert ref[b] == refs[b], (b, int(ref[b]), refs[b])


def summary(r: ScheduledRequest) -> tuple:
    """(id, num_computed, num_scheduled, num_tokens, num_prompt, tokens, table, cached)."""
    return (
        r.request_id,
        r.num_computed_tokens,
        r.num_scheduled_tokens,
        r.num_tokens,
        r.num_prompt_tokens,
        r.token_ids.tolist(),
        r.block_table,
        r.num_cached_tokens,
    )
