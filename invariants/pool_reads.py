"""What the incremental pool check reads of a snapshot: each read through the snapshot's
cheap point lookup where it has one, else through its full views (pool_delta.py lists
them). A full view costs O(pool) a step; an engine with a change log hands the lookups.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from schedcheck.engines.protocol import KVSnapshot

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_LAST = operator.itemgetter(-1)


def tables(snapshot: KVSnapshot) -> Mapping[str, Sequence[int]]:
    views = getattr(snapshot, "block_table_views", None)
    return views() if views is not None else snapshot.block_tables()


def table_ends(
    snapshot: KVSnapshot, tables: Mapping[str, Sequence[int]]
) -> tuple[list[str], list[int], list[int] | None]:
    """Every table's request id, length and last block, read in C (`table_ends()` where
    the snapshot has it); lasts None when a table is empty (the general path)."""
    ends = getattr(snapshot, "table_ends", None)
    read = ends() if ends is not None else None
    if read is not None:
        return read
    try:
        lasts: list[int] | None = list(map(_LAST, tables.values()))
    except IndexError:
        lasts = None
    return list(tables), list(map(len, tables.values())), lasts


def held_between_turns(snapshot: KVSnapshot) -> tuple[str, ...]:
    """Finished requests whose tables the engine keeps by design for a later turn (the
    optional `held_between_turns()`: vLLM's streaming-input sessions); none without it."""
    held = getattr(snapshot, "held_between_turns", None)
    return () if held is None else tuple(held())


def all_live(live: Collection[str], request_ids: list[str]) -> bool:
    """Is every one of `request_ids` live? In C where `live` can say so itself
    (`holds_all`: a view of the live requests less this step's finished ones)."""
    holds_all = getattr(live, "holds_all", None)
    if holds_all is not None:
        return bool(holds_all(request_ids))
    return all(map(live.__contains__, request_ids))


def ref_cnt_of(snapshot: KVSnapshot, ids: IntArray) -> IntArray:
    point = getattr(snapshot, "ref_cnt_of", None)
    if point is not None:
        return np.asarray(point(ids), np.int64)
    return np.asarray(snapshot.ref_cnt(), np.int64)[ids]


def is_free(snapshot: KVSnapshot, ids: IntArray) -> BoolArray:
    point = getattr(snapshot, "is_free", None)
    if point is not None:
        return np.asarray(point(ids), bool)
    contains = snapshot.free_block_ids().__contains__
    return np.fromiter(map(contains, ids.tolist()), bool, ids.size)


def num_free_entries(snapshot: KVSnapshot) -> int:
    count = getattr(snapshot, "num_free_entries", None)
    return int(count()) if count is not None else len(snapshot.free_block_ids())


def any_lost(snapshot: KVSnapshot, ids: IntArray) -> bool:
    """Is any of `ids` (ref_cnt 0, not free) neither cached nor kept by the engine itself
    (`is_kept(ids)`, where the snapshot has it: SGLang's page 0, tree and hidden rows)?"""
    kept = getattr(snapshot, "is_kept", None)
    if kept is not None:
        ids = ids[~np.asarray(kept(ids), bool)]
        if not ids.size:
            return False
    return None in hash_of(snapshot, ids)


def hash_of(snapshot: KVSnapshot, ids: IntArray) -> list[bytes | None]:
    point = getattr(snapshot, "hash_of", None)
    if point is not None:
        return list(point(ids))
    return list(map(snapshot.cached_blocks().get, ids.tolist()))
