"""A KVSnapshot read straight from vLLM v1's own `BlockPool` and KV-cache manager.

Nothing is copied at construction: each method walks vLLM's structures when called, so a
snapshot costs nothing for a step whose invariants do not ask, and it must not outlive the
step (the protocol's rule).

The null block. vLLM's BlockPool pops block 0 off the free queue at start-up and keeps it
as `null_block`, a placeholder for table entries that hold no KV (sliding-window and Mamba
groups); its ref_cnt is "not maintained" (block_pool.py): 0.33 leaves it 0, older
releases move it when a hybrid prefix hit touches or frees it. With the one
full-attention group we build, no request's table ever holds it. This snapshot reports it
as vLLM's own accounting does (`reset_prefix_cache`: "the null block is always marked as
used"): ref_cnt 1, never free, never cached, in no block table, and lists it in
`reserved_block_ids` (an attribute, as invariants/block_pool.py reads it). Invariants
should therefore check
    free + used == num_blocks, with used = {b : ref_cnt[b] > 0}, and
    ref_cnt[b] == count of b over block_tables()  for every b not in reserved_block_ids.

Hybrid KV cache (several KV-cache groups sharing the pool): a request's table is the
concatenation of its groups' req_to_blocks, group 0 first, without the null block a
sliding-window group holds where it freed blocks before the window (a reserved block is in
no table), and a cached block's hash keeps
vLLM's group id (BlockHashWithGroupId), since each group's KV of equal tokens differs.

Point reads for the incremental pool check (invariants/pool_delta.py), each O(ids asked):
`ref_cnt_of`, `is_free` (a block is linked into vLLM's free list iff its prev_free_block is
set), `num_free_entries` (the list's own count), `hash_of`, `block_table_views` (tables as
lazy id sequences over vLLM's block lists), `table_ends` (every table's length and last
block id, in C), and `take_changed_block_ids` from the adapter's `BlockChangeLog`
(changes.py).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterator, Mapping, Sequence
from itertools import compress, repeat
from typing import Any, overload

import numpy as np
import numpy.typing as npt
from vllm.v1.core.sched.scheduler import Scheduler

from schedcheck.engines.vllm.v1.changes import BlockChangeLog
from schedcheck.engines.vllm.v1.eras import block_hash_bytes, block_hashes_bytes
from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex
from schedcheck.engines.vllm.v1.sessions import Sessions

NULL_BLOCK_REF_CNT = 1  # reported for vLLM's null block: held by the pool itself
_REF_CNT = operator.attrgetter("ref_cnt")
_PREV_FREE = operator.attrgetter("prev_free_block")
_BLOCK_ID = operator.attrgetter("block_id")
_LAST = operator.itemgetter(-1)


class V1KVSnapshot:
    """KVSnapshot over one vLLM v1 scheduler (every KV-cache group; group 0 first)."""

    def __init__(
        self,
        scheduler: Scheduler,
        block_size: int,
        num_evicted_blocks: int,
        num_sliding_window_blocks_freed: int = 0,
        change_log: BlockChangeLog | None = None,
        hash_index: BlockHashIndex | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        self._scheduler = scheduler
        # streaming-input sessions (sessions.py): tables named by the turn running them
        self._sessions = sessions
        self._names = {} if sessions is None else sessions.renamed  # live, as the rest
        self._change_log = change_log
        self._hash_index = hash_index
        self.num_evicted_blocks = num_evicted_blocks  # cached blocks evicted, in total
        # blocks a sliding-window manager freed before a request's window, in total
        self.num_sliding_window_blocks_freed = num_sliding_window_blocks_freed
        self._pool = scheduler.kv_cache_manager.block_pool
        self._managers = scheduler.kv_cache_manager.coordinator.single_type_managers
        self._manager = self._managers[0]
        self._block_size = block_size

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_blocks(self) -> int:
        return int(self._pool.num_gpu_blocks)

    @property
    def reserved_block_ids(self) -> tuple[int, ...]:
        """Blocks the engine holds for itself, in no request's table: vLLM's null block."""
        return (int(self._pool.null_block.block_id),)

    def ref_cnt(self) -> npt.NDArray[np.int64]:
        blocks = self._pool.blocks
        out = np.fromiter((b.ref_cnt for b in blocks), np.int64, len(blocks))
        null = self._pool.null_block
        # its ref_cnt is "not maintained": 0.33 leaves it 0, older releases' touch() and
        # free_blocks() move it (hybrid prefix hits). Before 0.25.0, cache_full_blocks
        # may even give it a hash (a sliding window nulled a block before it was cached):
        # cached_blocks() reports that as it is, for the invariants to judge
        assert null.prev_free_block is None, "vLLM's null block is in its free list"
        out[null.block_id] = NULL_BLOCK_REF_CNT
        return out

    def free_block_ids(self) -> Sequence[int]:
        """vLLM's free_block_queue, head first (the head is evicted / reused first).

        Walked from the fake head along next_free_block, at most num_blocks links (a
        corrupt list may hold a cycle)."""
        queue = self._pool.free_block_queue
        tail = queue.fake_free_list_tail
        out: list[int] = []
        block = queue.fake_free_list_head.next_free_block
        for _ in range(self.num_blocks):  # bounded: a cycle must not hang the check
            if block is None or block is tail:
                break
            out.append(block.block_id)
            block = block.next_free_block
        return out

    # -- point reads for the incremental check ---------------------------------------------

    def take_changed_block_ids(self) -> Collection[int] | None:
        return None if self._change_log is None else self._change_log.take()

    def ref_cnt_of(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        blocks = map(self._pool.blocks.__getitem__, ids.tolist())
        return np.fromiter(map(_REF_CNT, blocks), np.int64, ids.size)  # in C

    def is_free(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        links = map(_PREV_FREE, map(self._pool.blocks.__getitem__, ids.tolist()))
        return np.fromiter(map(operator.is_not, links, repeat(None)), bool, ids.size)  # in C

    def num_free_entries(self) -> int:
        return int(self._pool.free_block_queue.num_free_blocks)

    def hash_of(self, ids: npt.NDArray[np.int64]) -> list[bytes | None]:
        blocks = self._pool.blocks
        hashes = [blocks[b].block_hash for b in ids.tolist()]
        keep_group = len(self._managers) > 1  # the group id stays, as in cached_blocks()
        return block_hashes_bytes(hashes, keep_group)

    def hash_positions(self, hashes: Sequence[bytes]) -> list[tuple[str, int, int] | None]:
        """Per cached hash (as `cached_blocks` gives it): (request id, position of the last
        token it covers, KV-cache group), from the live requests' block_hashes; None where
        no live request names it."""
        if self._hash_index is None:
            return [None] * len(hashes)
        self._hash_index.update(self._scheduler.requests)
        out = self._hash_index.positions(hashes, self._block_size, len(self._managers) > 1)
        if not self._names:
            return out
        names = self._names
        return [None if p is None else (names.get(p[0], p[0]), p[1], p[2]) for p in out]

    def held_between_turns(self) -> tuple[str, ...]:
        """Finished turns whose streaming-input session keeps its blocks for the later turn
        that waits (sessions.py): their tables are held by design, not leaked."""
        return () if self._sessions is None else tuple(self._sessions.kept)

    def _named(self, req_to_blocks: Mapping[str, Any]) -> Mapping[str, Any]:
        """`req_to_blocks` keyed by our names (sessions by the turn running them)."""
        if not self._names:
            return req_to_blocks
        names = self._names
        return {names.get(rid, rid): blocks for rid, blocks in req_to_blocks.items()}

    def block_table_views(self) -> Mapping[str, Sequence[int]]:
        """req_to_blocks as lazy id sequences (len, [i] and [i:] cost what they read).
        Several groups: the concatenated tables of `block_tables()`."""
        if len(self._managers) > 1:
            return self._hybrid_block_tables()
        return _TableViews(self._named(self._manager.req_to_blocks))

    def table_ends(self) -> tuple[list[str], list[int], list[int]] | None:
        """(request ids, lengths, last block ids) of `block_table_views()`, in its order,
        read in C from vLLM's lists of KVCacheBlock (the pool check's per-step look at
        every table); None with several groups (the views are plain lists then)."""
        if len(self._managers) > 1:
            return None
        req_to_blocks = self._named(self._manager.req_to_blocks)
        lists = list(compress(req_to_blocks.values(), req_to_blocks.values()))  # not empty
        request_ids = list(compress(req_to_blocks, req_to_blocks.values()))
        return request_ids, list(map(len, lists)), list(map(_BLOCK_ID, map(_LAST, lists)))

    def take_rewritten_req_ids(self) -> Collection[str]:
        """Tables to compare whole. Several groups: all of them, since a concatenated
        table does not grow at its end (group 0 grows in its middle, and a sliding-window
        group drops blocks before its window)."""
        if len(self._managers) > 1:  # the keys of _hybrid_block_tables(), no table built
            held = (self._named(m.req_to_blocks).items() for m in self._managers)
            return list(dict.fromkeys(rid for items in held for rid, blocks in items if blocks))
        return ()

    def cached_blocks(self) -> Mapping[int, bytes]:
        """block id -> vLLM's BlockHash (bytes, group id stripped), in block-id order."""
        keep_group = len(self._managers) > 1  # the group id stays: groups hold different KV
        return {
            b.block_id: block_hash_bytes(b.block_hash, keep_group)
            for b in self._pool.blocks
            if b.block_hash is not None
        }

    def block_tables(self) -> Mapping[str, Sequence[int]]:
        """The manager's own req_to_blocks (not the runner's copy), in its dict order;
        with several groups, each request's groups concatenated, group 0 first."""
        if len(self._managers) > 1:
            return self._hybrid_block_tables()
        return {
            req_id: [b.block_id for b in blocks]
            for req_id, blocks in self._named(self._manager.req_to_blocks).items()
            if blocks
        }

    def _hybrid_block_tables(self) -> Mapping[str, Sequence[int]]:
        out: dict[str, list[int]] = {}
        null_block = self._pool.null_block
        for manager in self._managers:
            for req_id, blocks in self._named(manager.req_to_blocks).items():
                if blocks:
                    held = (b.block_id for b in blocks if b is not null_block)
                    out.setdefault(req_id, []).extend(held)
        return out

    def num_computed_tokens(self) -> Mapping[str, int]:
        """request id -> Request.num_computed_tokens, for every request holding blocks.

        vLLM v1 keeps no separate count in the KV manager: `allocate_slots` reads the
        Request's own num_computed_tokens, which `schedule()` has already advanced by the
        step's scheduled tokens. `num_cached_blocks()` is the manager's own count.
        """
        requests, names = self._scheduler.requests, self._names
        return {
            names.get(req_id, req_id): int(requests[req_id].num_computed_tokens)
            for req_id, blocks in self._manager.req_to_blocks.items()
            if blocks
        }

    def num_cached_blocks(self) -> Mapping[str, int]:
        """request id -> the manager's num_cached_block: leading blocks whose hash it cached."""
        return dict(self._named(self._manager.num_cached_block))


class _BlockIds(Sequence[int]):
    """The block ids of one of vLLM's block lists, read on access."""

    __slots__ = ("_blocks",)

    def __init__(self, blocks: list[Any]) -> None:
        self._blocks = blocks

    def __len__(self) -> int:
        return len(self._blocks)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...

    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):
            return [b.block_id for b in self._blocks[index]]
        return int(self._blocks[index].block_id)


class _TableViews(Mapping[str, Sequence[int]]):
    """request id -> _BlockIds, for the requests whose list is not empty."""

    __slots__ = ("_req_to_blocks",)

    def __init__(self, req_to_blocks: Mapping[str, list[Any]]) -> None:
        self._req_to_blocks = req_to_blocks

    def __getitem__(self, request_id: str) -> Sequence[int]:
        blocks = self._req_to_blocks.get(request_id, [])  # get: a defaultdict must not grow
        if not blocks:
            raise KeyError(request_id)
        return _BlockIds(blocks)

    def __contains__(self, request_id: object) -> bool:
        return bool(self._req_to_blocks.get(request_id)) if isinstance(request_id, str) else False

    def __iter__(self) -> Iterator[str]:
        return (rid for rid, blocks in self._req_to_blocks.items() if blocks)

    def __len__(self) -> int:
        return sum(1 for blocks in self._req_to_blocks.values() if blocks)
