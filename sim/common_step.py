"""The shadow KV's common step in one compiled call (a mixin of the symbolic executor,
sim/symbolic.py): where a step's case may hold (a full KV-cache group and at most one
sliding-window group after it, metadata as documented, no block table that drops
verified blocks), `sim/step_kernel.py` writes, reads and samples it in one call (requests
with drafts are sampled by the rejection sampler after it); where the kernel declines, the
executor's phases run. A step where a request reads cached keys it has not verified (its
first step after a prefix-cache hit, a preemption or rejected drafts) hands the kernel
those key ranges too (`_prefix`).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from types import ModuleType

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.invariants import hash_model
from schedcheck.sim.token_store import ShadowRequest, TokenStore
from schedcheck.traces.tokens import FIRST_TOKEN_ID

I64 = np.int64
# common_step's `window`: group 1's slot mapping and tag; the store indices, key ranges and
# table entries of the windows read (NO_WINDOW: one KV-cache group)
Window = tuple[np.ndarray, np.uint64, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
NO_WINDOW: Window = (
    np.empty(0, I64), np.uint64(0), np.empty(0, np.int32), np.empty(0, I64), np.empty(0, I64),
    np.empty(0, I64),
)  # fmt: skip
# common_step's `prefix`: the batch indices, key ranges and table entries of the keys read
# before the chunks (NO_PREFIX: every request verified all keys before its chunk)
Prefix = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
NO_PREFIX: Prefix = (np.empty(0, I64), np.empty(0, I64), np.empty(0, I64), np.empty(0, I64))
_SEEN = operator.attrgetter("seen_table")
_COMPUTED = operator.attrgetter("num_computed_tokens")
_SCHEDULED = operator.attrgetter("num_scheduled_tokens")


class CommonStep:
    """Runs a common step in one call, and grows the requests' verified tables (for every
    step, common or not); reads and grows the executor's own state."""

    store: TokenStore
    shadow: np.ndarray
    writer_req: np.ndarray
    writer_pos: np.ndarray
    writer_step: np.ndarray
    verifiers: np.ndarray
    block_size: int
    vocab_size: int
    num_keys_checked: int
    _kernels: ModuleType
    _step_kernel: ModuleType

    def _add_verifiers(self, blocks: Sequence[int], delta: int) -> None:
        raise NotImplementedError  # the executor's: verifiers[b] += delta for each b

    def _common_step(
        self,
        meta: RunnerMetadata,
        reqs: list[ShadowRequest],
        idx: np.ndarray,
        reread: bool,
        num_known: dict[int, int],
    ) -> tuple[np.ndarray | None, dict[str, int] | None]:
        """The step in one call of step_kernel.common_step where its case may hold: a full
        KV-cache group, and a sliding-window one at most after it; metadata as documented;
        no table that drops verified blocks (`reread`: a request may read keys before its
        chunk that it has not verified: after a prefix hit, a preemption or rejected
        drafts). The requests with drafts (`num_known`'s batch indices) are not sampled.
        Returns (the identities written, if it wrote; the sampled tokens, if it is done)."""
        groups = meta.kv_groups
        if not (meta.as_documented and meta.num_tokens and len(groups) <= 2):
            return None, None
        if len(groups) == 2 and groups[1].kind != "sliding":
            return None, None
        tables = meta.block_tables
        if not self._tables_keep_verified(reqs, tables):
            return None, None
        scheduled = meta.output.scheduled  # the chunks' true positions: the scheduler's
        store = self.store
        rows = meta.logits_indices  # the sampling rows, less those of requests with drafts
        if num_known:
            rows = rows[~meta.batch_mask(num_known)[meta.row_req[rows]]]
        stage, true_ids, grown, new_blocks, tokens, num_range_keys = (
            self._step_kernel.common_step(
                (store.base, store.num_tokens, store.cap, store.ids, store.tokens),
                (self.shadow, self.writer_req, self.writer_pos, self.writer_step, self.verifiers),
                store.verified_len, store.verified_blocks, idx,
                np.fromiter(map(_COMPUTED, scheduled), I64, len(scheduled)),
                np.fromiter(map(_SCHEDULED, scheduled), I64, len(scheduled)),
                meta.num_computed_tokens, meta.seq_lens, meta.query_start_loc, meta.input_ids,
                meta.slot_mapping, meta.positions, meta.row_req, rows,
                meta.output.step, self.block_size, self.vocab_size - FIRST_TOKEN_ID,
                self._prefix(meta, idx) if reread else NO_PREFIX,
                self._window(meta, idx) if len(groups) == 2 else NO_WINDOW,
            )
        )  # fmt: skip
        if stage != self._step_kernel.DONE:
            return (true_ids if stage == self._step_kernel.WRITTEN else None), None
        self.num_keys_checked += meta.num_tokens + int(num_range_keys)
        self._grow_tables(reqs, tables, grown, new_blocks, None)
        names = [meta.req_ids[i] for i in meta.row_req[rows].tolist()]
        return true_ids, dict(zip(names, tokens.tolist(), strict=True))

    def _prefix(self, meta: RunnerMetadata, idx: np.ndarray) -> Prefix:
        """common_step's `prefix`: the requests whose verified keys end before their chunk,
        and the keys [verified_len, num_computed) each reads through its block table (as
        `_read` reads them; a request verified past its chunk's start declines the step)."""
        lows, highs = self.store.verified_len[idx], meta.num_computed_tokens
        behind = lows < highs
        if not np.count_nonzero(behind):  # most steps (before flatnonzero: a third the cost)
            return NO_PREFIX
        todo = np.flatnonzero(behind)
        return (todo, *self._key_ranges(meta.block_tables, todo, lows, highs))

    def _window(self, meta: RunnerMetadata, idx: np.ndarray) -> Window:
        """common_step's `window`: group 1's slot mapping and tag, and the store indices,
        key ranges and table entries of the windows its rows read (`_read_group`'s)."""
        todo, lows, highs = self._window_ranges(meta, 1)
        lo, hi, entries = self._key_ranges(meta.tables_of_group(1), todo, lows, highs)
        tag = hash_model.group_tag(1)
        return meta.slots_of_group(1), tag, idx[todo], lo, hi, entries

    def _window_ranges(
        self, meta: RunnerMetadata, group: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(todo, lows, highs): the keys [lows[i], highs[i]) that request i's rows read
        through sliding-window group `group`, and the requests todo that read any
        (shadow_kernels.window_lows, one pass)::

            window of the row at position p:  keys [max(0, p - W + 1), p]
            keys read for request i:          [first row's window start, seq_lens[i])
        """
        kv_group = meta.kv_groups[group]
        assert kv_group.kind == "sliding", f"group {group}: only sliding groups follow group 0"
        todo, lows = self._kernels.window_lows(
            meta.positions, meta.query_start_loc, meta.seq_lens, kv_group.sliding_window
        )
        return todo, lows, meta.seq_lens

    def _key_ranges(
        self,
        tables: Sequence[tuple[int, ...]],
        todo: np.ndarray,
        lows: np.ndarray,
        highs: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError  # the executor's: key ranges and the entries they touch

    def _tables_keep_verified(
        self, reqs: list[ShadowRequest], tables: Sequence[tuple[int, ...]]
    ) -> bool:
        """Does every table the engine changed keep its request's verified blocks? (Those
        that do are seen now; one that does not is left to `_revalidate`.)"""
        for i in changed_tables(reqs, tables):  # bounded: the batch
            if not keeps_verified(reqs[i], tables[i]):
                return False
            reqs[i].seen_table = tables[i]
        return True

    def _grow_tables(
        self,
        reqs: list[ShadowRequest],
        tables: Sequence[tuple[int, ...]],
        grown: np.ndarray,
        new_blocks: np.ndarray,
        todo: np.ndarray | None,
    ) -> None:
        """Request todo[k] (k itself if todo is None), for each k in `grown`, now verifies
        its first new_blocks[k] blocks: its verified table grows to them, and they gain it
        as a verifier."""
        if grown.size == 0:
            return
        store = self.store
        blocks: list[int] = []
        for k, n in zip(grown.tolist(), new_blocks.tolist(), strict=True):
            i = k if todo is None else int(todo[k])
            req, table = reqs[i], tables[i]
            blocks += table[len(req.verified_table) : n]
            req.verified_table = table[:n]
            store.verified_blocks[req.index] = len(req.verified_table)
        self._add_verifiers(blocks, 1)


def changed_tables(reqs: list[ShadowRequest], tables: Sequence[tuple[int, ...]]) -> list[int]:
    """The batch indices whose table is not the one their request saw at its last check
    (an engine hands an unchanged table as the same tuple: compared by identity, in C)."""
    changed = list(map(operator.is_not, tables, map(_SEEN, reqs)))
    if not any(changed):
        return []
    return list(itertools.compress(range(len(reqs)), changed))


def keeps_verified(req: ShadowRequest, table: tuple[int, ...]) -> bool:
    """Does `table` still start with the blocks whose keys `req` verified?"""
    n = len(req.verified_table)
    return not n or table[:n] == req.verified_table
