"""The incremental pool check's copy of every block table, and what a step changed.

Each step the engine's tables are compared with the copies kept here (pool_delta.py uses
the blocks that entered or left a table: `held` counts them). A table is assumed to change
by growing at its end or by being dropped; its first and last old entries are compared.
Compared whole are the tables of requests preempted since the last check (one can be
admitted again in the same step, in a table of equal length) and of those the engine says
it rewrote in place. Every table's request id, length and last block are read each step
in C (`table_ends`); only the tables dropped, new, or whose length or last block moved
are looked at in Python.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence
from itertools import compress
from typing import cast

from schedcheck.engines.protocol import KVSnapshot
from schedcheck.invariants import pool_reads as reads


class KeptTables:
    """Each request's block table as last seen, and the diff of a step against them."""

    def __init__(self) -> None:
        self.tables: dict[str, list[int]] = {}  # each request's block table, as last seen
        # the tables' request ids, lengths and last blocks as of the last diff (fast path)
        self._rids: list[str] | None = None  # None: the next diff looks at every table
        self._lens: list[int] = []
        self._lasts: list[int] = []

    def reset(self, tables: Mapping[str, Sequence[int]]) -> None:
        """Copies of `tables` (a full sweep's); the next diff looks at every table."""
        self.tables = {rid: list(t) for rid, t in tables.items() if len(t)}
        self._rids = None

    def diff(
        self,
        snapshot: KVSnapshot,
        live: Collection[str],
        preempted: Collection[str],
        num_blocks: int,
    ) -> tuple[bool, list[int], list[int]]:
        """Bring `tables` up to date; whether a table is held by a request not live, and
        the blocks that entered or left a table (in [0, num_blocks)).

        Fast path (_diff_moved; every step without a preemption or an empty table, unless
        the tables' order changed): lengths and last blocks of all are read and compared
        in C (map), and only the tables dropped, new or moved are looked at."""
        tables = reads.tables(snapshot)
        rids, lens, lasts = reads.table_ends(snapshot, tables)
        stale_owner = not reads.all_live(live, rids) and any(
            len(tables[rid]) for rid in rids if rid not in live
        )  # owners: only live requests hold blocks
        diffed = None
        if lasts is not None and not preempted and self._rids is not None:
            diffed = self._diff_moved(tables, rids, lens, lasts)
        removed, added = self._diff_all(tables, preempted) if diffed is None else diffed
        self._rids = rids if lasts is not None else None  # an empty table: diff all next
        self._lens, self._lasts = lens, lasts or []
        for ids in (removed, added):
            if ids and (min(ids) < 0 or max(ids) >= num_blocks):
                ids[:] = [b for b in ids if 0 <= b < num_blocks]
        return stale_owner, removed, added

    def _diff_moved(
        self,
        tables: Mapping[str, Sequence[int]],
        rids: list[str],
        lens: list[int],
        lasts: list[int],
    ) -> tuple[list[int], list[int]] | None:
        """The fast path: the tables as last seen, less the dropped ones, in the same order,
        and new ones after them (a dict's order: finished requests leave, admitted ones come
        last). Only the dropped tables, the new ones and those whose length or last block
        moved are looked at; the rest is compared in C (map). None where the order differs
        otherwise (every table is then diffed)."""
        old_rids, old_lens, old_lasts = cast(list[str], self._rids), self._lens, self._lasts
        assert len(self.tables) == len(old_rids), "the kept tables are the last check's"
        removed: list[int] = []
        if rids != old_rids:  # each pass below over the tables, in C
            kept = list(map(tables.__contains__, old_rids))
            survivors = list(compress(old_rids, kept))
            if rids[: len(survivors)] != survivors:
                return None
            for rid in compress(old_rids, map(operator.not_, kept)):  # bounded: the dropped
                removed += self.tables.pop(rid)
            old_lens, old_lasts = list(compress(old_lens, kept)), list(compress(old_lasts, kept))
        elif lens == old_lens and lasts == old_lasts:  # most steps: no table moved
            return removed, []
        grown = map(operator.ne, lens, old_lens)  # the survivors (zip stops at the shorter)
        moved = compress(rids, map(operator.or_, grown, map(operator.ne, lasts, old_lasts)))
        more_removed, added = self._diff_some(tables, [*moved, *rids[len(old_lens) :]], ())
        return removed + more_removed, added

    def _diff_all(
        self, tables: Mapping[str, Sequence[int]], preempted: Collection[str]
    ) -> tuple[list[int], list[int]]:
        """Every table against the kept copies: dropped, new, grown or rewritten."""
        kept = self.tables
        removed: list[int] = []
        for rid in [rid for rid in kept if rid not in tables or not len(tables[rid])]:
            removed.extend(kept.pop(rid))  # dropped (finished, aborted, preempted)
        rids = [rid for rid, table in tables.items() if len(table)]
        more_removed, added = self._diff_some(tables, rids, preempted)
        return removed + more_removed, added

    def _diff_some(
        self, tables: Mapping[str, Sequence[int]], rids: list[str], preempted: Collection[str]
    ) -> tuple[list[int], list[int]]:
        kept = self.tables
        removed: list[int] = []
        added: list[int] = []
        for rid in rids:  # bounded: the requests holding blocks
            table = tables[rid]
            n = len(table)
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
        return removed, added


def _grew_at_end(old: list[int], table: Sequence[int], n: int, preempted: bool) -> bool:
    """True if `table` is `old` with blocks appended (or unchanged)."""
    m = len(old)
    if n < m:
        return False
    if preempted:
        return list(table[:m]) == old
    return m == 0 or (table[0] == old[0] and table[m - 1] == old[m - 1])
