"""A KVSnapshot of SGLang's KV state at slot granularity (block size 1), read when asked.

SGLang has no per-block reference count: a KV slot (page_size P: a page of P slots) is
either in the allocator's free lists, in the radix tree (evictable when no request locks
its node, else protected), or in a request's req_to_token row only (KV it computed and has
not yet checkpointed into the tree). This snapshot names slots, as the shadow KV does for
an engine that hands slot lists (`engines/metadata.py`):

- block_tables: live request -> its row [0, kv_allocated_len), plus the rest of its last
  page when P > 1 (the allocator hands out whole pages);
- ref_cnt: how many live rows hold each slot;
- free_block_ids: the allocator's free pages (free, released or staged), as slots;
- reserved_block_ids: page 0 (SGLang's padding page), the tree's slots
  (`all_values_flatten()`: held by the cache, not by a request; the tree keeps token keys,
  not block hashes, so `cached_blocks()` is empty and a tree slot's content is checked
  when a prefix hit reads it), and the rows of requests we aborted that SGLang still runs
  for one step ("abort method 3").

So the block-pool invariants read: a free slot is held by no live row and listed once
(double free), and every slot is free, in the tree, or held (leak).

Incrementally (invariants/pool_delta.py), with the allocator watched (`changes.py`):
`take_changed_block_ids` names the slots that entered or left the free lists since the
last check, `is_free` reads the watched free mask, `num_free_entries` SGLang's own count,
`ref_cnt_of` counts the live rows holding each slot asked about, and `is_kept` says which
of the slots no row holds and no free list names are SGLang's own (page 0, the tree, the
rows of aborted requests it still runs): the tree is read only when some are asked about.

SGLang's own idle statement (its scheduler's invariant checker: available + evictable +
protected == total once nothing runs, and nothing protected) is `idle_problems()`, checked
whenever the engine is idle (invariants/idle.py); `num_evicted_blocks` counts the slots the
tree evicted (build.count_evictions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.sglang.changes import AllocatorLog

IntArray = npt.NDArray[np.int64]


class SglangKVSnapshot:
    def __init__(
        self,
        scheduler: Any,
        config: EngineConfig,
        live: Mapping[str, Any],
        hidden: Iterable[Any],
        log: AllocatorLog | None = None,
        sessions: Any = None,
    ) -> None:
        self._s = scheduler
        self._page = config.block_size
        self._num_slots = config.num_gpu_blocks * config.block_size
        self._live = live  # our request id -> SGLang Req, for the live requests holding a row
        self._hidden = list(hidden)
        self._rows = scheduler.req_to_token_pool.req_to_token.numpy()
        self._tables: dict[str, IntArray] | None = None
        self._free: IntArray | None = None  # read once a snapshot: O(free slots)
        self._log = log
        # the KV records sessions hold between turns (sessions.SglangSessions)
        self._session_rows = [] if sessions is None else sessions.held_rows(live)

    @property
    def block_size(self) -> int:
        return 1

    @property
    def num_blocks(self) -> int:
        return self._num_slots

    def _held(self, req: Any) -> IntArray:
        return self._held_kv(req.kv)

    def _held_kv(self, kv: Any) -> IntArray:
        if kv.req_pool_idx is None or kv.kv_allocated_len == 0:
            return np.zeros(0, np.int64)
        row = self._rows[kv.req_pool_idx, : kv.kv_allocated_len].astype(np.int64)
        rest = (-row.size) % self._page
        if rest and row.size:  # the rest of the last page is the request's too
            row = np.concatenate([row, row[-1] + 1 + np.arange(rest, dtype=np.int64)])
        return row

    def block_table_views(self) -> Mapping[str, IntArray]:
        """Each live row holder's slots, as arrays (read once a snapshot)."""
        if self._tables is None:
            tables = {rid: self._held(req) for rid, req in self._live.items()}
            self._tables = {rid: t for rid, t in tables.items() if t.size}
        return self._tables

    def block_tables(self) -> Mapping[str, Sequence[int]]:
        return {rid: t.tolist() for rid, t in self.block_table_views().items()}

    # -- the incremental check's reads (with the allocator watched) -------------------------

    def take_changed_block_ids(self) -> list[int] | None:
        if self._log is None:
            return None
        changed = self._log.take_changed(self.free_block_ids)
        return None if changed is None else changed.tolist()

    def is_free(self, ids: IntArray) -> npt.NDArray[np.bool_]:
        assert self._log is not None, "is_free reads the watched allocator"
        return self._log.is_free(ids)

    def num_free_entries(self) -> int:
        return int(self._s.token_to_kv_pool_allocator.available_size())

    def ref_cnt_of(self, ids: IntArray) -> IntArray:
        """How many live rows hold each of `ids`: one gather per held slot (O(live rows'
        slots) in numpy, no O(pool) count and no search per slot); 0 outside the pool."""
        ids = np.asarray(ids, np.int64)
        out = np.zeros(ids.size, np.int64)
        inside = (ids >= 0) & (ids < self._num_slots)
        flat = self._held_slots()
        if not flat.size or not inside.any():
            return out
        distinct = np.unique(ids[inside])
        asked = np.zeros(self._num_slots, bool)
        asked[distinct] = True
        counts = np.bincount(np.searchsorted(distinct, flat[asked[flat]]), minlength=distinct.size)
        out[inside] = counts[np.searchsorted(distinct, ids[inside])]
        return out

    def hash_of(self, ids: IntArray) -> list[bytes | None]:
        return [None] * len(ids)  # the tree keys tokens, not block hashes

    def is_kept(self, ids: IntArray) -> npt.NDArray[np.bool_]:
        """Which of `ids` SGLang keeps itself: its reserved slots (page 0, the tree's slots,
        the rows of the aborted requests it still runs; O(tree), read only when asked)."""
        return np.isin(np.asarray(ids, np.int64), self.reserved_block_ids, kind="table")

    def ref_cnt(self) -> IntArray:
        return np.bincount(self._held_slots(), minlength=self._num_slots).astype(np.int64)

    def _held_slots(self) -> IntArray:
        """Every slot a live row holds, once per row holding it (those inside the pool)."""
        tables = self.block_table_views()
        if not tables:
            return np.zeros(0, np.int64)
        flat = np.concatenate(list(tables.values()))
        return flat[(flat >= 0) & (flat < self._num_slots)]

    def free_block_ids(self) -> IntArray:
        """Every free slot, an int64 array (read once: the check and the resync both ask)."""
        if self._free is None:
            self._free = free_slots(self._s.token_to_kv_pool_allocator, self._page)
        return self._free

    @property
    def reserved_block_ids(self) -> IntArray:
        parts = [np.arange(self._page, dtype=np.int64), tree_slots(self._s.tree_cache)]
        parts += [self._held(req) for req in self._hidden]
        parts += [self._held_kv(kv) for kv in self._session_rows]
        return np.concatenate(parts)

    def cached_blocks(self) -> Mapping[int, bytes]:
        return {}

    @property
    def num_evicted_blocks(self) -> int:
        """Slots the radix tree evicted so far (blocks of this snapshot's size 1)."""
        return int(self._s.tree_cache.num_evicted_slots)

    def idle_problems(self) -> list[str]:
        """SGLang's idle statement: with nothing running, no slot is protected (locked by
        a request) and available + evictable == the pool's total."""
        available = int(self._s.token_to_kv_pool_allocator.available_size())
        evictable = int(self._s.tree_cache.evictable_size())
        protected = int(self._s.tree_cache.protected_size())
        total = int(self._s.max_total_num_tokens)
        problems = []
        if self._session_rows:  # sessions lock their prefixes and hold their own KV
            return self._session_problems(available, evictable, protected, total)
        if protected:
            problems.append(
                f"idle, SGLang's radix tree still protects {protected} slots: a lock no "
                "running request holds was never released"
            )
        if available + evictable != total:
            problems.append(
                f"idle, SGLang's available {available} + evictable {evictable} != total "
                f"{total} slots: {total - available - evictable} slots are neither free nor cached"
            )
        return problems

    def _session_problems(
        self, available: int, evictable: int, protected: int, total: int
    ) -> list[str]:
        """SGLang's idle statement while sessions hold KV between turns (its invariant
        checker's): available + evictable + protected + session-held == total."""
        held = session_held_tokens(self._s.tree_cache, self._page)
        accounted = available + evictable + protected + held
        if accounted == total:
            return []
        return [
            f"idle, SGLang's available {available} + evictable {evictable} + protected "
            f"{protected} + session-held {held} != total {total} slots: {total - accounted} "
            "slots are neither free, cached nor a session's"
        ]

    def num_computed_tokens(self) -> Mapping[str, int]:
        """request id -> SGLang's kv_committed_len (KV content committed), per row holder."""
        return {
            rid: int(req.kv.kv_committed_len)
            for rid, req in self._live.items()
            if req.kv.req_pool_idx is not None
        }


def waiting_reasons(scheduler: Any, waiting: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """Why each (request id, Req) of `waiting` that SGLang does not run now waits (for
    liveness reports): the running batch's size and the pool's free and evictable slots."""
    running = {id(r) for r in scheduler.running_batch.reqs}
    free = scheduler.token_to_kv_pool_allocator.available_size()
    evictable = scheduler.tree_cache.evictable_size()
    reason = f"waiting: {len(running)} running, {free} free slots, {evictable} evictable"
    return {rid: reason for rid, req in waiting if id(req) not in running}


def session_held_tokens(tree_cache: Any, page_size: int) -> int:
    """SGLang's own count of the slots its sessions hold (its idle statement's term)."""
    from sglang.srt.managers.scheduler_components.pool_stats_observer import kv_private_tokens

    records = tree_cache.session_records().values()
    return sum(kv_private_tokens(kv, page_size) for kv in records if kv.holds_kv)


def free_slots(allocator: Any, page_size: int) -> IntArray:
    """Every free slot of the allocator, free pages first, then released / staged ones."""
    if page_size == 1:
        parts = [allocator.free_pages, allocator.release_pages]
    else:
        parts = [allocator.free_pages, *allocator.staged_pages]
    pages = np.concatenate([p.numpy().astype(np.int64) for p in parts])
    if page_size == 1:
        return pages
    return (pages[:, None] * page_size + np.arange(page_size, dtype=np.int64)).ravel()


def tree_slots(tree_cache: Any) -> IntArray:
    return tree_cache.all_values_flatten().numpy().astype(np.int64)
