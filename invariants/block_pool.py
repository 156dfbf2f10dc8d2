"""Block pool: every block is accounted for exactly once, and cached blocks hold their hash.

Properties:
- ref-cnt: a block's ref_cnt equals the number of live block tables that hold it;
- free-queue: the free queue names each block at most once, and only blocks with
  ref_cnt 0 (a referenced block is never evicted); every block with ref_cnt 0 is in the
  free queue or in the prefix cache (no block is lost);
- owners: only live requests hold block tables (a finished or aborted request holds none);
- cached-content: a cached block was fully written (where the engine says which tokens a
  hash names, `ExpectedContent`: with those tokens' KV), and equal block hashes always name
  equal content: the hash model's identity of the block's last slot, which covers the
  block's tokens *and* every token before it (vllm#12621: a hash without its parent);
- no leak: once every request has finished, no block is referenced.

Blocks an engine reserves for itself (vLLM's null block) are named by the snapshot's
optional `reserved_block_ids` and are left out.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Collection, Mapping
from itertools import compress
from typing import cast

import numpy as np

from schedcheck.engines.protocol import KVSnapshot
from schedcheck.invariants import pool_reads
from schedcheck.invariants.hash_memory import HashMemory
from schedcheck.invariants.violation import Violation

BlockContents = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
Named = tuple[str, int, int]  # a hash's tokens: request id, last position, KV-cache group
# for cached hashes: the identity each one's KV must hold (uint64, 0 where unknown), and
# where its tokens are (None where no request names it)
ExpectedContent = Callable[[list[bytes]], tuple[np.ndarray, list[Named | None]]]
HASH_MEMORY_MAX = 1 << 20  # block hashes whose content is remembered (oldest forgotten first)


class BlockPoolChecker:
    """Keeps the content each block hash has named so far (hash -> identity)."""

    def __init__(self) -> None:
        # hash -> identity, oldest first, in arrays (about 60 bytes a hash: hash_memory.py)
        self.content_of_hash = HashMemory(max_size=HASH_MEMORY_MAX)
        self.checked_hash_of_block: dict[int, bytes] = {}  # as of the last check
        # set by the loop each check where the engine says what its hashes mean
        self.expected_content: ExpectedContent | None = None
        # the last check's per-block counts of holders and of free-queue entries (O(pool)
        # to build): the incremental checker's resync after a sweep takes them
        self.last_read: tuple[np.ndarray, np.ndarray] | None = None
        # the counts, compiled (numba): imported with the first checker (see sim/symbolic.py)
        from schedcheck.invariants import pool_census

        self._census = pool_census

    @property
    def hash_order(self) -> list[bytes]:
        """The hashes remembered, oldest first (the order they are forgotten in)."""
        return list(self.content_of_hash)

    def check(
        self,
        step: int,
        snapshot: KVSnapshot,
        live_request_ids: Collection[str],
        block_contents: BlockContents,
    ) -> list[Violation]:
        out: list[Violation] = []
        reserved = np.asarray(getattr(snapshot, "reserved_block_ids", ()), dtype=np.int64)
        tables = snapshot.block_tables()
        out.extend(_check_owners(step, tables, live_request_ids))
        ref_cnt = np.asarray(snapshot.ref_cnt(), dtype=np.int64)
        table_ids = np.fromiter(itertools.chain.from_iterable(tables.values()), np.int64)
        cached = snapshot.cached_blocks()
        free_ids = free_id_array(snapshot)
        cached_ids = np.fromiter(cached, np.int64, len(cached))
        census = self._census.take_census(
            step, table_ids, ref_cnt, free_ids, cached_ids, reserved, snapshot.num_blocks
        )
        out.extend(census.ref_cnt_findings)
        out.extend(_check_free_count(step, free_ids.size, snapshot))
        out.extend(census.free_queue_findings)
        out.extend(self._check_cached(step, cached, block_contents))
        self.last_read = (census.held, census.counts)
        return [_with_holder(v, tables, snapshot.block_size) for v in out]

    def _check_cached(
        self, step: int, cached: Mapping[int, bytes], block_contents: BlockContents
    ) -> list[Violation]:
        """Check the blocks cached (or re-cached under a new hash) since the last check.

        A block that stays cached under the same hash is not checked again: if its slots are
        overwritten later, whoever reads them through a cache hit sees it (shadow-kv.read).
        """
        checked = self.checked_hash_of_block
        fresh = [b for b, h in cached.items() if checked.get(b) != h]
        self.checked_hash_of_block = dict(cached)
        fresh.sort()
        return self.check_fresh(step, fresh, list(map(cached.__getitem__, fresh)), block_contents)

    def check_fresh(
        self,
        step: int,
        fresh: list[int],
        hashes: list[bytes],
        block_contents: BlockContents,
    ) -> list[Violation]:
        """Check blocks newly cached (sorted ids) under their hashes (`hashes[k]`: block
        `fresh[k]`'s): fully written, and their content equal to what that hash named
        before."""
        if not fresh:
            return []
        assert len(hashes) == len(fresh), "one hash per block"
        block_ids = np.asarray(fresh, dtype=np.int64)
        identity, complete = block_contents(block_ids)
        out = _unwritten(step, block_ids, complete)
        if out:
            block_ids, identity = block_ids[complete], identity[complete]
            hashes = list(compress(hashes, complete.tolist()))
        ids = block_ids.tolist()
        stale = self._check_meaning(step, ids, hashes, identity)
        out.extend(stale[:1])
        if stale:  # not a hash's content: not remembered as one
            gone = {v.block for v in stale}
            kept = [b not in gone for b in ids]
            ids, hashes = list(compress(ids, kept)), list(compress(hashes, kept))
            identity = identity[np.array(kept, dtype=bool)]
        self._make_room(len(fresh))
        return out + self._remember(step, ids, identity, hashes)

    def check_fresh_words(
        self,
        step: int,
        fresh: np.ndarray,
        words: np.ndarray,
        block_contents: BlockContents,
    ) -> list[Violation]:
        """check_fresh of blocks (sorted ids) whose 32-byte hashes are rows of 4 words
        (`words[k]`: block `fresh[k]`'s): the same checks and memory, no bytes object built
        but for a finding. Where the engine says what its hashes mean, check_fresh."""
        if self.expected_content is not None:  # the meanings are looked up by bytes
            hashes = [row.tobytes() for row in words]
            return self.check_fresh(step, fresh.tolist(), hashes, block_contents)
        if not fresh.size:
            return []
        identity, complete = block_contents(fresh)
        out = _unwritten(step, fresh, complete)
        self._make_room(fresh.size)
        if out:
            fresh, identity, words = fresh[complete], identity[complete], words[complete]
        index, first = self.content_of_hash.remember_words(words, identity)
        if index < 0:
            return out
        b, h = int(fresh[index]), words[index].tobytes()
        return [*out, _other_content(step, b, h, first, int(identity[index]))]

    def _make_room(self, num_new: int) -> None:
        """Forget the oldest hashes so that `num_new` more keep the memory within
        HASH_MEMORY_MAX (bounded memory)."""
        seen = self.content_of_hash
        seen.forget_oldest(len(seen) + num_new - HASH_MEMORY_MAX)

    def _remember(
        self, step: int, ids: list[int], identity: np.ndarray, hashes: list[bytes]
    ) -> list[Violation]:
        """Each block's hash names its identity, as it did before (the first time: from now
        on), walked in block order: a hash named twice this step is compared with its
        first; the first hash that named other content is reported, and the hashes after
        it are not remembered (HashMemory.remember does the walk in arrays)."""
        index, first = self.content_of_hash.remember(hashes, identity)
        if index < 0:
            return []
        return [_other_content(step, ids[index], hashes[index], first, int(identity[index]))]

    def _check_meaning(
        self, step: int, block_ids: list[int], hashes: list[bytes], identity: np.ndarray
    ) -> list[Violation]:
        """Blocks whose content is not the KV of the tokens their hash names: all slots
        written, but for other tokens (a chunk cached when scheduled that never ran)."""
        if self.expected_content is None or not block_ids:
            return []
        want, named = self.expected_content(hashes)
        out: list[Violation] = []
        for k in np.flatnonzero((want != 0) & (want != identity)).tolist():  # bounded: blocks
            b, (request_id, _, _) = block_ids[k], cast(Named, named[k])  # known: want != 0
            out.append(
                Violation(
                    "block-pool.cached-unwritten",
                    step,
                    f"block {b} is in the prefix cache under the hash of "
                    f"{_tokens_of(cast(Named, named[k]))}, but its slots were written for "
                    "other tokens (never for these)",
                    block=b,
                    request_id=request_id,
                    expected=f"identity {int(want[k]):#x}",
                    found=f"identity {int(identity[k]):#x}",
                )
            )
        return out


def _unwritten(step: int, block_ids: np.ndarray, complete: np.ndarray) -> list[Violation]:
    """The first block cached with slots never written (cached-content), if any."""
    if np.count_nonzero(complete) == complete.size:  # complete.all(), at a third of its cost
        return []
    b = int(block_ids[~complete][0])
    message = f"block {b} is in the prefix cache but not all of its slots were written"
    return [Violation("block-pool.cached-unwritten", step, message, block=b)]


def _other_content(step: int, b: int, h: bytes, first: int, ident: int) -> Violation:
    """Block b's hash h named identity `first` before; the block holds `ident`."""
    return Violation(
        "block-pool.hash-content",
        step,
        f"block {b}'s hash {h.hex()[:16]} named other content "
        "before: equal hash, different tokens or parents",
        block=b,
        expected=f"identity {first:#x}",
        found=f"identity {ident:#x}",
    )


def _tokens_of(named: Named) -> str:
    """The tokens a hash names, in words (only when a finding quotes them)."""
    request_id, position, group = named
    words = f"{request_id}'s tokens up to position {position}"
    return words + (f" (KV-cache group {group})" if group else "")


def with_holder(violations: list[Violation], snapshot: KVSnapshot) -> list[Violation]:
    """The violations, each naming the first request that holds its block (if any)."""
    if not violations:
        return violations
    tables = snapshot.block_tables()
    return [_with_holder(v, tables, snapshot.block_size) for v in violations]


def _with_holder(v: Violation, tables, block_size: int) -> Violation:
    """Name the first request whose block table holds the violation's block, and where."""
    if v.block < 0 or v.request_id:
        return v
    for rid, table in tables.items():  # rare path: only for a violation
        if v.block in table:
            position = list(table).index(v.block) * block_size
            return dataclasses.replace(v, request_id=rid, position=position)
    return v


def free_id_array(snapshot: KVSnapshot) -> np.ndarray:
    """The free queue as an int64 array (an engine whose queue is an array already, SGLang's
    allocator, hands it as one: no Python int per free block)."""
    ids = snapshot.free_block_ids()
    if isinstance(ids, np.ndarray):
        return ids.astype(np.int64, copy=False)
    return np.fromiter(ids, np.int64)


def _check_owners(step: int, tables, live) -> list[Violation]:
    stale = [rid for rid in tables if rid not in live and len(tables[rid]) > 0]
    return [
        Violation(
            "block-pool.owner",
            step,
            "holds blocks but is not a live request",
            request_id=rid,
            found=f"{len(tables[rid])} blocks",
        )
        for rid in stale[:1]
    ]


def _check_free_count(step: int, num_walked: int, snapshot: KVSnapshot) -> list[Violation]:
    """A queue that keeps its own count (vLLM's linked list) holds that many entries."""
    count = getattr(snapshot, "num_free_entries", None)
    if count is None or int(count()) == num_walked:
        return []
    return [
        Violation(
            "block-pool.free-queue",
            step,
            f"the free queue counts {int(count())} entries but holds {num_walked}: "
            "a block was linked in twice or unlinked unseen",
            expected=str(num_walked),
            found=str(int(count())),
        )
    ]


def check_no_leak(step: int, snapshot: KVSnapshot) -> list[Violation]:
    """Once every request finished, no block is referenced (sglang#1858) but by the tables
    the engine keeps for a later turn (the optional `held_between_turns()`: vLLM's
    streaming-input sessions), each of which holds its blocks once."""
    ref_cnt = np.asarray(snapshot.ref_cnt(), dtype=np.int64)
    if not np.count_nonzero(ref_cnt):  # the common case, in one call: nothing referenced
        return []
    ref_cnt = ref_cnt.copy()
    ref_cnt[np.asarray(getattr(snapshot, "reserved_block_ids", ()), dtype=np.int64)] = 0
    held = pool_reads.held_between_turns(snapshot)
    tables = snapshot.block_tables() if held else {}
    for rid in held:  # bounded: the sessions kept
        np.subtract.at(ref_cnt, np.asarray(tables.get(rid, ()), np.int64), 1)
    return [
        Violation(
            "block-pool.leak",
            step,
            f"every request finished, block {int(b)} still has ref_cnt {int(ref_cnt[b])}",
            block=int(b),
        )
        for b in np.flatnonzero(ref_cnt != 0)[:1]
    ]
