"""Block pool, incrementally: each step, check exactly the blocks that changed.

The properties of block_pool.py (ref-cnt, free-queue, leak, owners, cached-content), at a
cost that grows with the step's change, not with the pool::

    changed = blocks that entered or left a block table since the last check
              (each live table against the copy kept here: an append costs its new blocks)
            | blocks the engine logged: ref_cnt, hash or free-queue position changed
              (snapshot.take_changed_block_ids())

Kept here for every block id: `held` (how many tables hold it, from the tables as last seen)
and `free` (in the free queue when last checked). For each changed block b::

    ref_cnt[b] == held[b]                          (ref-cnt)
    b in the free queue  =>  ref_cnt[b] == 0       (free-queue)
    ref_cnt[b] == 0      =>  b free or cached      (leak)
    b newly cached       =>  written, and its hash names the content it named before

and for the queue as a whole, len(free queue) == blocks seen free: a block queued twice
shows as one entry too many at the step it happens.

An engine that has no change log (no `take_changed_block_ids`, or it answers None: the
first call, which turns the log on) is swept in full that step. When the changed blocks
break a property, the full sweep of block_pool.py runs and is the authority: a finding
reads exactly as the full check words it, and every later step is swept in full too (the
pool is corrupt already). Should the sweep find nothing (this checker's copy of a table
went stale: an engine rewrote a table entry in place), its state is rebuilt and the run
goes on incrementally; `num_unconfirmed` counts such steps. The caller runs the full sweep
at the end of the run.

What the incremental path needs to be cheap (read through pool_reads.py):
`ref_cnt_of(ids)` (else `ref_cnt()` must be an array view), `is_free(ids)` /
`num_free_entries()` (else the free queue's `in` and `len` must be O(1)), `hash_of(ids)`
(else `cached_blocks().get`), `block_table_views()`
(else `block_tables()`) whose tables answer len, [i] and [i:] cheaply, and optionally
`table_ends()` (every table's id, length and last block at once), `is_kept(ids)` (blocks
no table holds and no queue names that the engine keeps itself: SGLang's tree; such a
snapshot's reserved blocks are among them, not left out) and `hash_changes_of(ids)`
(each block's count of hash changes: most changed blocks only changed ref_cnt or queue
position, and their hashes are then not read). The tables are diffed by pool_tables.py;
compared whole are those of requests preempted since the last check and those the engine
says it rewrote in place (`take_rewritten_req_ids()`: the radix manager switching a
request to the tree's copy of a page).

`held` and `free` are arrays, walked by compiled passes over the step's blocks
(pool_delta_kernels.py): the holder counts and the distinct changed blocks in one, then,
after the engine's ref_cnt and free-queue membership of those blocks are read by id, their
properties in another (ref_cnt != held, free and referenced, neither free nor referenced).
A snapshot that hands its pool as arrays (`pool_arrays()`: ref_cnt, in the free queue and
hash changes per block id, all of it the engine's own) has all of it done in one walk, and
one that also hands its 32-byte hashes as words (`hash_words()`) has its new hashes checked
as rows of words: the hash each block was checked with is then kept in arrays, and the full
check's dict is rebuilt from them only when a sweep runs. Which block breaks a property is
left to the full sweep.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from itertools import compress, repeat
from typing import cast

import numpy as np
import numpy.typing as npt

from schedcheck.engines.protocol import KVSnapshot, hash_words_of
from schedcheck.invariants import pool_reads as reads
from schedcheck.invariants.block_pool import BlockContents, BlockPoolChecker, with_holder
from schedcheck.invariants.pool_tables import KeptTables
from schedcheck.invariants.violation import Violation

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_NONE: IntArray = np.zeros(0, np.int64)


class PoolDeltaChecker:
    """The block-pool check of one run: incremental each step, a full sweep when needed."""

    def __init__(self) -> None:
        self.full = BlockPoolChecker()  # also holds the hash -> content memory
        self.kept = KeptTables()  # each request's block table, as last seen
        self.held: IntArray = np.zeros(0, np.int64)  # how many tables hold each block id
        self.free = np.zeros(0, bool)  # the block was in the free queue when last checked
        self.num_free = 0  # blocks marked in `free`
        self.synced = False  # the state above mirrors the engine as of the last check
        self.sweep_always = False  # after a violation
        self.num_blocks_checked = 0  # blocks checked by the last call (a full sweep: all)
        self.num_sweeps = 0  # full sweeps so far
        self.num_unconfirmed = 0  # incremental findings the full sweep did not confirm
        self.changed: IntArray = _NONE  # the blocks of the current check, sorted
        # per block id, the engine's count of its hash changes when last looked at (engines
        # with `hash_changes_of`): a changed block whose count did not move kept its hash
        self.hash_changes: IntArray = _NONE
        # the compiled passes' scratch, one byte a block; and the blocks whose hash moved,
        # found by the walk of a snapshot with `pool_arrays`, for _check_cached
        self._marks = np.zeros(0, np.uint8)
        self._rehashed_now: IntArray | None = None
        # snapshots with `hash_words`: the hash each block was checked with, as 4 words,
        # and whether it has one (the full check's `checked_hash_of_block` in arrays; while
        # they exist they, not the dict, say what was checked)
        self._checked_words: npt.NDArray[np.uint64] | None = None
        self._checked_present: BoolArray | None = None
        from schedcheck.invariants import pool_delta_kernels  # numba: with the first check

        self._kernels = pool_delta_kernels

    def check(
        self,
        step: int,
        snapshot: KVSnapshot,
        live_request_ids: Collection[str],
        block_contents: BlockContents,
        preempted_req_ids: Collection[str] = (),
    ) -> list[Violation]:
        """Check the step; `preempted_req_ids`: preempted since the previous check."""
        take = getattr(snapshot, "take_changed_block_ids", None)
        logged = take() if take is not None else None
        take_rewritten = getattr(snapshot, "take_rewritten_req_ids", None)
        if take_rewritten is not None:  # tables an engine rewrote in place: compared whole
            preempted_req_ids = {*preempted_req_ids, *take_rewritten()}
        if logged is None or not self.synced or self.sweep_always:
            return self.sweep(step, snapshot, live_request_ids, block_contents)
        if self._suspect(snapshot, live_request_ids, logged, preempted_req_ids):
            swept = self.sweep(step, snapshot, live_request_ids, block_contents)  # confirms, words
            self.num_unconfirmed += not swept
            return swept
        out = self._check_cached(step, snapshot, block_contents)
        if out:
            self.sweep_always = True
            return with_holder(out, snapshot)
        return out

    def sweep(
        self,
        step: int,
        snapshot: KVSnapshot,
        live_request_ids: Collection[str],
        block_contents: BlockContents,
    ) -> list[Violation]:
        """The full check of block_pool.py, then this checker's state rebuilt from the pool."""
        self._checked_as_dict()
        out = self.full.check(step, snapshot, live_request_ids, block_contents)
        self._sync(snapshot)
        self.num_blocks_checked = snapshot.num_blocks
        self.num_sweeps += 1
        self.sweep_always |= bool(out)
        self.changed, self._rehashed_now = _NONE, None
        return out

    # -- the incremental step -------------------------------------------------------------

    def _suspect(
        self,
        snapshot: KVSnapshot,
        live: Collection[str],
        logged: Collection[int],
        preempted: Collection[str],
    ) -> bool:
        """Bring the kept state up to date; True if a changed block, or the free queue's
        count, breaks a property (the full sweep then says which)."""
        suspect, removed, added = self.kept.diff(snapshot, live, preempted, self.held.size)
        pool_arrays = getattr(snapshot, "pool_arrays", None)
        if pool_arrays is not None:  # one compiled walk (pool_delta_kernels.py)
            suspect |= self._walk_changed(snapshot, pool_arrays(), removed, added, logged)
        else:  # two compiled passes, the engine's counts of the changed blocks read between
            suspect |= self._read_changed(snapshot, removed, added, logged)
        return suspect or reads.num_free_entries(snapshot) != self.num_free

    def _walk_changed(
        self,
        snapshot: KVSnapshot,
        pool: tuple[IntArray, BoolArray, IntArray],
        removed: list[int],
        added: list[int],
        logged: Collection[int],
    ) -> bool:
        """The holder counts, the changed blocks, their properties and the blocks whose
        hash moved, in one compiled walk over the step's blocks, on the snapshot's own
        arrays (ref_cnt, in the free queue, hash changes per block id)."""
        ids, suspect, num_free_delta, lost, rehashed = self._kernels.step_blocks(
            self.held, self.free, self.hash_changes, self._scratch(), *pool,
            _ids(removed), _ids(added), _ids(logged), _reserved(snapshot),
        )  # fmt: skip
        self.changed, self.num_blocks_checked = ids, ids.size
        self.num_free += num_free_delta
        self._rehashed_now = rehashed
        return suspect or (lost.size > 0 and reads.any_lost(snapshot, lost))

    def _read_changed(
        self, snapshot: KVSnapshot, removed: list[int], added: list[int], logged: Collection[int]
    ) -> bool:
        """_walk_changed for a snapshot that reads its blocks' counts by id: the holder
        counts and the changed blocks in one compiled pass, then the engine's ref_cnt and
        free-queue membership of those blocks, then their properties in another."""
        ids = self._kernels.step_ids(
            self.held, self._scratch(), _ids(removed), _ids(added), _ids(logged),
            _reserved(snapshot),
        )  # fmt: skip
        self.changed, self.num_blocks_checked = ids, ids.size
        if not ids.size:
            return False
        suspect, num_free_delta, lost = self._kernels.check_read(
            self.held, self.free, ids, reads.ref_cnt_of(snapshot, ids), reads.is_free(snapshot, ids)
        )
        self.num_free += num_free_delta
        return suspect or (lost.size > 0 and reads.any_lost(snapshot, lost))

    def _scratch(self) -> npt.NDArray[np.uint8]:
        """The kernels' scratch marks, one byte a block id, all 0 between calls."""
        if self._marks.size != self.held.size:
            self._marks = np.zeros(self.held.size, np.uint8)
        return self._marks

    def _check_cached(
        self, step: int, snapshot: KVSnapshot, block_contents: BlockContents
    ) -> list[Violation]:
        """The changed blocks cached under a hash they were not checked with. Where the
        engine counts its hash changes, every block whose count moved is looked at again
        (one whose hash changed and came back is checked again, not skipped); else its hash
        is compared with the one it was checked with, in C (map)."""
        ids, all_moved = self._rehashed(snapshot, self.changed)
        if not ids.size:
            return []
        words = getattr(snapshot, "hash_words", None)
        view = words() if words is not None and all_moved else None
        if view is not None and (self._checked_words is not None or self._checked_as_words()):
            cached_now, words_now = view
            return self._check_cached_words(step, ids, cached_now, words_now, block_contents)
        self._checked_as_dict()  # the dict path from here on
        id_list = ids.tolist()
        hashes = reads.hash_of(snapshot, ids)
        checked = self.full.checked_hash_of_block
        if not all_moved:
            before = list(map(checked.get, id_list))
            if hashes == before:
                return []
            moved = list(map(operator.ne, hashes, before))
            id_list, hashes = list(compress(id_list, moved)), list(compress(hashes, moved))
        cached = list(map(operator.is_not, hashes, repeat(None)))
        if not all(cached):  # no longer cached: forgotten (evicted since, maybe unchecked)
            list(map(checked.pop, compress(id_list, map(operator.not_, cached)), repeat(None)))
        fresh = list(compress(id_list, cached))
        fresh_hashes = cast(list[bytes], list(compress(hashes, cached)))  # none is None
        checked.update(zip(fresh, fresh_hashes, strict=True))
        return self.full.check_fresh(step, fresh, fresh_hashes, block_contents)

    def _check_cached_words(
        self,
        step: int,
        ids: IntArray,
        cached_now: BoolArray,
        words: npt.NDArray[np.uint64],
        block_contents: BlockContents,
    ) -> list[Violation]:
        """_check_cached on the snapshot's hash words (`hash_words()`): the blocks still
        cached are checked with their hashes as rows of words, and the hash each was checked
        with is kept in arrays (the full sweep's dict is rebuilt from them when it runs)."""
        checked_words, checked_present = self._checked_words, self._checked_present
        assert checked_words is not None and checked_present is not None
        fresh, fresh_words = self._kernels.fresh_rows(  # evicted since: forgotten
            ids, cached_now, words, checked_present, checked_words
        )
        return self.full.check_fresh_words(step, fresh, fresh_words, block_contents)

    def _checked_as_dict(self) -> None:
        """The hash each block was checked with back in the full check's dict (a sweep
        reads it; the dict path keeps it), and the word arrays dropped: they are not kept
        up to date from here on."""
        words, present = self._checked_words, self._checked_present
        if words is not None and present is not None:
            ids = np.flatnonzero(present).tolist()
            rows = words[present]
            self.full.checked_hash_of_block = dict(zip(ids, map(bytes, rows), strict=True))
        self._checked_words = self._checked_present = None

    def _checked_as_words(self) -> bool:
        """The full check's dict of checked hashes as word arrays, when the words path
        starts (the dict is up to date then: the arrays are dropped whenever it is used);
        False where a hash in it is not 32 bytes (the dict path goes on)."""
        checked = self.full.checked_hash_of_block
        words = hash_words_of(list(checked.values()))
        if words is None:
            return False
        num_blocks = self.held.size
        self._checked_words = np.zeros((num_blocks, 4), np.uint64)
        self._checked_present = np.zeros(num_blocks, bool)
        ids = np.fromiter(checked, np.int64, len(checked))
        self._checked_words[ids] = words
        self._checked_present[ids] = True
        return True

    def _rehashed(self, snapshot: KVSnapshot, ids: IntArray) -> tuple[IntArray, bool]:
        """Those of `ids` whose hash may have changed since they were last looked at, and
        whether each of them did: the engine counts its hash changes (else all of `ids`,
        which may not have)."""
        if self._rehashed_now is not None:  # the compiled walk found them
            rehashed, self._rehashed_now = self._rehashed_now, None
            return rehashed, True
        count = getattr(snapshot, "hash_changes_of", None)
        if count is None or not ids.size:
            return ids, False
        now = np.asarray(count(ids), np.int64)
        moved = now != self.hash_changes[ids]
        self.hash_changes[ids] = now
        return ids[moved], True

    def _sync(self, snapshot: KVSnapshot) -> None:
        """Rebuild tables, held and free from the whole pool (after the full check, from
        the holder and free-queue counts it took)."""
        num_blocks = snapshot.num_blocks
        self.kept.reset(reads.tables(snapshot))
        read, self.full.last_read = self.full.last_read, None
        assert read is not None, "a resync follows the full check that counted the pool"
        held, free_counts = read  # what the check just counted: the same tables and queue
        self.held = held.astype(np.int64, copy=False)
        self.free = free_counts > 0
        self.num_free = int(np.count_nonzero(self.free))
        count = getattr(snapshot, "hash_changes_of", None)
        if count is not None:
            self.hash_changes = np.asarray(count(np.arange(num_blocks)), np.int64).copy()
        self.synced = True


def _ids(ids: Collection[int]) -> IntArray:
    """Block ids as an int64 array (none: the shared empty one)."""
    return np.fromiter(ids, np.int64, len(ids)) if len(ids) else _NONE


def _reserved(snapshot: KVSnapshot) -> IntArray:
    """The blocks left out of the check: the snapshot's reserved ones (vLLM's null block),
    none where it says which blocks it keeps itself (SGLang's tree: those are checked)."""
    reserved = getattr(snapshot, "reserved_block_ids", ())
    if hasattr(snapshot, "is_kept") or not len(reserved):
        return _NONE
    return np.array(reserved, np.int64)
