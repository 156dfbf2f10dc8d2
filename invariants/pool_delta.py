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

What the incremental path needs to be cheap: `ref_cnt_of(ids)` (else `ref_cnt()` must be
an array view), `is_free(ids)` / `num_free_entries()` (else the free queue's `in` and
`len` must be O(1)), `hash_of(ids)` (else `cached_blocks().get`), `block_table_views()`
(else `block_tables()`) whose tables answer len, [i] and [i:] cheaply. A table is assumed
to change by growing at its end or by being dropped; its first and last old entries are
compared. Compared whole are the tables of requests preempted since the last check (one
can be admitted again in the same step, in a table of equal length) and of those the
engine says it rewrote in place (`take_rewritten_req_ids()`: the radix manager switching a
request to the tree's copy of a page).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from schedcheck.engines.protocol import KVSnapshot
from schedcheck.invariants.block_pool import BlockContents, BlockPoolChecker, with_holder
from schedcheck.invariants.violation import Violation

IntArray = npt.NDArray[np.int64]


class PoolDeltaChecker:
    """The block-pool check of one run: incremental each step, a full sweep when needed."""

    def __init__(self) -> None:
        self.full = BlockPoolChecker()  # also holds the hash -> content memory
        self.tables: dict[str, list[int]] = {}  # each request's block table, as last seen
        self.held: IntArray = np.zeros(0, np.int64)  # tables holding each block
        self.free: npt.NDArray[np.bool_] = np.zeros(0, bool)  # in the free queue, last seen
        self.num_free = 0  # blocks marked in `free`
        self.synced = False  # the state above mirrors the engine as of the last check
        self.sweep_always = False  # after a violation
        self.num_blocks_checked = 0  # blocks checked by the last call (a full sweep: all)
        self.num_sweeps = 0  # full sweeps so far
        self.num_unconfirmed = 0  # incremental findings the full sweep did not confirm
        self.changed: IntArray = np.zeros(0, np.int64)  # the blocks of the current check

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
        out = self._check_changed(step, snapshot, live_request_ids, logged, preempted_req_ids)
        if out:  # the full sweep confirms and words it
            swept = self.sweep(step, snapshot, live_request_ids, block_contents)
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
        out = self.full.check(step, snapshot, live_request_ids, block_contents)
        self._sync(snapshot)
        self.num_blocks_checked = snapshot.num_blocks
        self.num_sweeps += 1
        self.sweep_always |= bool(out)
        self.changed = np.zeros(0, np.int64)
        return out

    # -- the incremental step -------------------------------------------------------------

    def _check_changed(
        self,
        step: int,
        snapshot: KVSnapshot,
        live: Collection[str],
        logged: Collection[int],
        preempted: Collection[str],
    ) -> list[Violation]:
        out, table_changes = self._diff_tables(step, snapshot, live, preempted)
        changed = np.unique(np.concatenate([table_changes, np.fromiter(logged, np.int64)]))
        num_blocks = self.held.size
        changed = changed[(changed >= 0) & (changed < num_blocks)]
        reserved = getattr(snapshot, "reserved_block_ids", ())
        if len(reserved):
            changed = changed[~np.isin(changed, np.asarray(reserved, np.int64))]
        self.num_blocks_checked = int(changed.size)
        self.changed = changed
        if changed.size == 0:
            return out + self._check_free_count(step, snapshot)
        ref_cnt = _ref_cnt_of(snapshot, changed)
        is_free = _is_free(snapshot, changed)
        self.num_free += int(is_free.sum()) - int(self.free[changed].sum())
        self.free[changed] = is_free
        out += _ref_cnt_violations(step, changed, ref_cnt, self.held[changed])
        out += _free_violations(step, changed, ref_cnt, is_free)
        out += self._check_free_count(step, snapshot)
        lost = changed[(ref_cnt == 0) & ~is_free]
        if lost.size:
            out += _leak_violations(step, lost, _hash_of(snapshot, lost))
        return out

    def _diff_tables(
        self, step: int, snapshot: KVSnapshot, live: Collection[str], preempted: Collection[str]
    ) -> tuple[list[Violation], IntArray]:
        """Bring `tables` and `held` up to date; the blocks that entered or left a table."""
        tables = _tables(snapshot)
        removed: list[int] = []
        added: list[int] = []
        out: list[Violation] = []
        kept = self.tables
        for rid in [rid for rid in kept if rid not in tables or not len(tables[rid])]:
            removed.extend(kept.pop(rid))  # dropped (finished, aborted, preempted)
        for rid, table in tables.items():  # bounded: the requests holding blocks
            n = len(table)
            if n == 0:
                continue
            if rid not in live and not out:
                out.append(_owner_violation(step, rid, n))
            old = kept.get(rid)
            if old is None:
                added.extend(kept.setdefault(rid, list(table)))
            elif not _grew_at_end(old, table, n, rid in preempted):
                removed.extend(old)
                kept[rid] = list(table)
                added.extend(kept[rid])
            elif n > len(old):
                new = list(table[len(old) :])
                old.extend(new)
                added.extend(new)
        rem = np.asarray(removed, np.int64)
        add = np.asarray(added, np.int64)
        num_blocks = self.held.size
        np.subtract.at(self.held, rem[(rem >= 0) & (rem < num_blocks)], 1)
        np.add.at(self.held, add[(add >= 0) & (add < num_blocks)], 1)
        return out, np.concatenate([rem, add])

    def _check_free_count(self, step: int, snapshot: KVSnapshot) -> list[Violation]:
        num_entries = _num_free_entries(snapshot)
        if num_entries == self.num_free:
            return []
        return [
            Violation(
                "block-pool.free-queue",
                step,
                f"the free queue has {num_entries} entries but {self.num_free} distinct "
                "free blocks: a block is in it twice, or one left it unseen",
                expected=str(self.num_free),
                found=str(num_entries),
            )
        ]

    def _check_cached(
        self, step: int, snapshot: KVSnapshot, block_contents: BlockContents
    ) -> list[Violation]:
        """The changed blocks cached under a hash they were not checked with."""
        ids = self.changed
        if ids.size == 0:
            return []
        hashes = _hash_of(snapshot, ids)
        checked = self.full.checked_hash_of_block
        fresh: list[int] = []
        hash_of: dict[int, bytes] = {}
        for b, h in zip(ids.tolist(), hashes, strict=True):
            if h is None:
                checked.pop(b, None)
            elif checked.get(b) != h:
                checked[b] = hash_of[b] = h
                fresh.append(b)
        return self.full.check_fresh(step, fresh, hash_of, block_contents)

    def _sync(self, snapshot: KVSnapshot) -> None:
        """Rebuild tables, held and free from the whole pool (after a full sweep)."""
        num_blocks = snapshot.num_blocks
        self.tables = {rid: list(t) for rid, t in _tables(snapshot).items() if len(t)}
        flat = np.fromiter((b for t in self.tables.values() for b in t), np.int64)
        flat = flat[(flat >= 0) & (flat < num_blocks)]
        self.held = np.bincount(flat, minlength=num_blocks).astype(np.int64)
        self.free = np.zeros(num_blocks, bool)
        free_ids = np.fromiter(snapshot.free_block_ids(), np.int64)
        self.free[free_ids[(free_ids >= 0) & (free_ids < num_blocks)]] = True
        self.num_free = int(self.free.sum())
        self.synced = True


def _grew_at_end(old: list[int], table: Sequence[int], n: int, preempted: bool) -> bool:
    """True if `table` is `old` with blocks appended (or unchanged)."""
    m = len(old)
    if n < m:
        return False
    if preempted:
        return list(table[:m]) == old
    return m == 0 or (table[0] == old[0] and table[m - 1] == old[m - 1])


def _tables(snapshot: KVSnapshot) -> Mapping[str, Sequence[int]]:
    views = getattr(snapshot, "block_table_views", None)
    return views() if views is not None else snapshot.block_tables()


def _ref_cnt_of(snapshot: KVSnapshot, ids: IntArray) -> IntArray:
    point = getattr(snapshot, "ref_cnt_of", None)
    if point is not None:
        return np.asarray(point(ids), np.int64)
    return np.asarray(snapshot.ref_cnt(), np.int64)[ids]


def _is_free(snapshot: KVSnapshot, ids: IntArray) -> npt.NDArray[np.bool_]:
    point = getattr(snapshot, "is_free", None)
    if point is not None:
        return np.asarray(point(ids), bool)
    free = snapshot.free_block_ids()
    return np.fromiter((b in free for b in ids.tolist()), bool, ids.size)


def _num_free_entries(snapshot: KVSnapshot) -> int:
    count = getattr(snapshot, "num_free_entries", None)
    return int(count()) if count is not None else len(snapshot.free_block_ids())


def _hash_of(snapshot: KVSnapshot, ids: IntArray) -> list[bytes | None]:
    point = getattr(snapshot, "hash_of", None)
    if point is not None:
        return list(point(ids))
    get = snapshot.cached_blocks().get
    return [get(b) for b in ids.tolist()]


def _owner_violation(step: int, rid: str, num_blocks: int) -> Violation:
    return Violation(
        "block-pool.owner",
        step,
        "holds blocks but is not a live request",
        request_id=rid,
        found=f"{num_blocks} blocks",
    )


def _ref_cnt_violations(step: int, ids: IntArray, ref_cnt: IntArray, held: IntArray) -> list:
    return [
        Violation(
            "block-pool.ref-cnt",
            step,
            f"block {int(ids[i])} has ref_cnt {int(ref_cnt[i])} but {int(held[i])} block "
            "tables hold it",
            block=int(ids[i]),
            expected=str(int(held[i])),
            found=str(int(ref_cnt[i])),
        )
        for i in np.flatnonzero(ref_cnt != held)[:1]
    ]


def _free_violations(step: int, ids: IntArray, ref_cnt: IntArray, is_free) -> list[Violation]:
    return [
        Violation(
            "block-pool.free-queue",
            step,
            f"block {int(ids[i])} is in the free queue with ref_cnt {int(ref_cnt[i])}: "
            "a referenced block could be evicted",
            block=int(ids[i]),
        )
        for i in np.flatnonzero(is_free & (ref_cnt > 0))[:1]
    ]


def _leak_violations(step: int, lost: IntArray, hashes: list[bytes | None]) -> list[Violation]:
    return [
        Violation(
            "block-pool.leak",
            step,
            f"block {b} has ref_cnt 0 but is neither free nor cached: "
            "it can never be allocated again",
            block=b,
        )
        for b, h in zip(lost.tolist(), hashes, strict=True)
        if h is None
    ][:1]
