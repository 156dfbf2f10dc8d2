"""A KVSnapshot read from vLLM v0's own block manager (v1 or v2) of 0.5.4 or 0.6.0.

Block manager v1 (`BlockSpaceManagerV1`, prefix caching: `CachedBlockAllocator`) creates
PhysicalTokenBlocks lazily: ids [current_num_blocks, num_blocks) were never handed out and
are free; a created block is either referenced (`cached_blocks`, ref_count >= 1) or free
in the LRU `evictor` (ref_count 0). Every created block carries a `block_hash` (a content
hash, or a counter value for blocks allocated without content), reported as vLLM keeps it.

Block manager v2 (`BlockSpaceManagerV2`, `PrefixCachingBlockAllocator`): free ids are the
hashless allocator's `_free_block_indices` plus the evictor's; ref counts live in
`_refcounter`; `_cached_blocks` maps content hash -> block id.

What counts as cached. v0 gives a block its hash when it is allocated, before its tokens
are written (bm v1 also hashes the last, partial block of a prompt, and gives
content-less blocks a counter value), and shares hashed blocks between requests at once;
what a later prompt may *skip* is decided by the computed flags (`computed_block_nums`).
So `cached_blocks()` reports the blocks the manager would offer as already computed: bm v1
`block.computed`, bm v2 `block_is_computed`, with their hashes. `hashed_blocks()` is the
whole hash map (bm v1: every created block; bm v2: `_cached_blocks`).

Free order: ids vLLM would hand out without evicting, in that order, then the evictor's
`free_table` in insertion order. The evictor's exact pick (lowest last_accessed, then most
hashed tokens; 0.5.4 and 0.6.0 scan differently) is not replayed here. There is no null
block in v0: `reserved_block_ids` is empty. Hashes are Python ints of token tuples
(deterministic: int hashing is not salted), reported as 8 signed little-endian bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
from vllm.core.scheduler import Scheduler
from vllm.sequence import Sequence as VllmSequence
from vllm.utils import Device


def hash_bytes(block_hash: int) -> bytes:
    """vLLM v0's int block hash as bytes (Python's hash() of ints is in [-2**63, 2**63))."""
    return int(block_hash).to_bytes(8, "little", signed=True)


class V0KVSnapshot:
    """KVSnapshot over one v0 scheduler's GPU blocks."""

    def __init__(
        self,
        scheduler: Scheduler,
        block_size: int,
        live_seqs: Callable[[], Mapping[str, VllmSequence]],
        num_evicted_blocks: int,
    ) -> None:
        self._scheduler = scheduler
        self.num_evicted_blocks = num_evicted_blocks  # cached blocks evicted, in total
        self._manager = scheduler.block_manager
        self._block_size = block_size
        self._live_seqs = live_seqs  # request id -> its Sequence, for the live requests
        self._state = _v2_state(self._manager) if _is_v2(self._manager) else None

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def num_blocks(self) -> int:
        return int(self._manager.num_total_gpu_blocks)

    @property
    def reserved_block_ids(self) -> tuple[int, ...]:
        """No null block in v0."""
        return ()

    def ref_cnt(self) -> npt.NDArray[np.int64]:
        out = np.zeros(self.num_blocks, dtype=np.int64)
        if self._state is not None:
            for block_id, count in self._state.refcounts().items():
                out[block_id] = count
            return out
        for block in _v1_created_blocks(self._manager):
            out[block.block_number] = block.ref_count
        return out

    def free_block_ids(self) -> Sequence[int]:
        if self._state is not None:
            return self._state.free_ids()
        return _v1_free_ids(self._manager.gpu_allocator)

    def cached_blocks(self) -> Mapping[int, bytes]:
        """block id -> hash, for the hashed blocks the manager marks computed."""
        computed = set(self.computed_block_ids())
        return {b: h for b, h in self.hashed_blocks().items() if b in computed}

    def hashed_blocks(self) -> Mapping[int, bytes]:
        """block id -> hash, for every block in the manager's hash map, in block-id order."""
        if self._state is not None:
            return self._state.hashed()
        if not hasattr(self._manager.gpu_allocator, "cached_blocks"):
            return {}
        blocks = sorted(_v1_created_blocks(self._manager), key=lambda b: b.block_number)
        return {b.block_number: hash_bytes(b.block_hash) for b in blocks}

    def block_tables(self) -> Mapping[str, Sequence[int]]:
        """request id -> `block_manager.get_block_table(seq)`, for each seq holding blocks."""
        tables = self._manager.block_tables
        return {
            rid: list(self._manager.get_block_table(seq))
            for rid, seq in self._live_seqs().items()
            if seq.seq_id in tables
        }

    def num_computed_tokens(self) -> Mapping[str, int]:
        """request id -> the sequence's `data.get_num_computed_tokens()` (v0 keeps the count
        in SequenceData, which the engine advances after each step)."""
        tables = self._manager.block_tables
        return {
            rid: int(seq.data.get_num_computed_tokens())
            for rid, seq in self._live_seqs().items()
            if seq.seq_id in tables
        }

    def computed_block_ids(self) -> tuple[int, ...]:
        """Blocks the manager marks computed (bm v1: `block.computed`; bm v2: the tracker),
        i.e. what it would offer to a later prompt as already written (bug classes 3 and 4,
        docs/bug-classes.md)."""
        if self._state is not None:
            return self._state.computed_ids()
        return tuple(
            sorted(b.block_number for b in _v1_created_blocks(self._manager) if b.computed)
        )


# ----------------------------------------------------------- block manager v1 --
def _v1_created_blocks(manager) -> list:
    """Every PhysicalTokenBlock the GPU allocator has created, each once."""
    allocator = manager.gpu_allocator
    if hasattr(allocator, "cached_blocks"):  # CachedBlockAllocator: referenced | evictable
        return [*allocator.cached_blocks.values(), *allocator.evictor.free_table.values()]
    # UncachedBlockAllocator: free list + blocks held by tables (it keeps no used list)
    seen = {b.block_number: b for b in allocator.free_blocks}
    for table in manager.block_tables.values():
        for block in table:
            seen.setdefault(block.block_number, block)
    return list(seen.values())


def _v1_free_ids(allocator) -> list[int]:
    if hasattr(allocator, "cached_blocks"):
        never_created = range(allocator.current_num_blocks, allocator.num_blocks)
        evictable = [b.block_number for b in allocator.evictor.free_table.values()]
        return [*never_created, *evictable]
    return [b.block_number for b in reversed(allocator.free_blocks)]  # it pops the tail


# ----------------------------------------------------------- block manager v2 --
def _is_v2(manager) -> bool:
    return hasattr(manager, "block_allocator")


class _V2State:
    """Reads of the v2 GPU allocator (PrefixCachingBlockAllocator or NaiveBlockAllocator)."""

    def __init__(self, allocator) -> None:
        self._allocator = allocator
        self._caching = hasattr(allocator, "_cached_blocks")
        self._hashless = allocator._hashless_allocator if self._caching else allocator

    def refcounts(self) -> Mapping[int, int]:
        return self._allocator._refcounter._refcounts

    def free_ids(self) -> list[int]:
        ids = list(self._hashless._free_block_indices)
        if self._caching:
            ids += list(self._allocator.evictor.free_table.keys())
        return ids

    def hashed(self) -> dict[int, bytes]:
        if not self._caching:
            return {}
        by_id = {block_id: h for h, block_id in self._allocator._cached_blocks.items()}
        assert len(by_id) == len(self._allocator._cached_blocks), "two hashes, one block"
        return {block_id: hash_bytes(by_id[block_id]) for block_id in sorted(by_id)}

    def computed_ids(self) -> tuple[int, ...]:
        if not self._caching:
            return ()
        return tuple(
            block_id
            for block_id in sorted(self._allocator.all_block_ids)
            if self._allocator.block_is_computed(block_id)
        )


def gpu_evictor(manager):
    """The GPU allocator's evictor: every `evict()` reuses a block that held cached KV
    (block manager v1 `CachedBlockAllocator.allocate_block`, v2
    `PrefixCachingBlockAllocator._maybe_allocate_evicted_block_id`); None without prefix
    caching (the uncached allocators have none)."""
    allocator = _v2_gpu_allocator(manager) if _is_v2(manager) else manager.gpu_allocator
    return getattr(allocator, "evictor", None)


def _v2_gpu_allocator(manager):
    return manager.block_allocator._allocators[Device.GPU]


def _v2_state(manager) -> _V2State:
    return _V2State(_v2_gpu_allocator(manager))
