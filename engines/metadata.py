"""Runner metadata derived from a SchedulerOutput, in one place, as a model runner does.

Both executors (the symbolic one in `sim/`, the tensor one in `gpu/`) read a step only
through this metadata, so a bug here or in the scheduler shows up in both.

Layout of one step with three requests (block_size 4)::

    request         A (prefill chunk)      B (decode)   C (last prefill chunk)
    num_computed    4                      9            8
    num_scheduled   3                      1            2
    flattened rows  0   1   2              3            4   5
    positions       4   5   6              9            8   9
    query_start_loc [0,                    3,           4,        6]
    seq_lens        7                      10           10
    block_table     A: [7, 2]              B: [3, 5, 1] C: [4, 6, 8]
    slot_mapping    2*4+0 2*4+1 2*4+2      1*4+1        8*4+0 8*4+1
    logits_indices  (A does not sample)    3            5          -> [3, 5]

`positions[t]` is an index (0-based) into the request's tokens; `seq_lens[i]` is a count:
the attention key length of request i = num_computed_tokens + num_scheduled_tokens.
Row r of request i attends keys 0 .. r - query_start_loc[i] + seq_lens[i] - query_len[i]
(causal, bottom-right aligned: the last query row sees every key).
A slot is `block_id * block_size + offset`. Padding in `block_table_array` is -1.

With speculative decoding (`num_lookahead_tokens` k > 0) a drafter runs after the target
model and writes the KV of its k draft tokens past each sampling request's tokens, through
the same block table (vLLM v1's EAGLE heads, v0's lookahead slots)::

    request C above, k = 3:  | computed | chunk |  drafts (lookahead)  |
                             0          8      10                     13
    lookahead_positions      10 11 12           (capped at max_model_len)
    lookahead_slot_mapping   8*4+2  8*4+3  -1   (C's table covers 12 tokens: slot -1 is
                                                 past its end, an illegal memory access)

The scheduler must have allocated those slots (vllm#16370): computed + new + lookahead.

Engines that address KV per token (`ScheduledRequest.slots`: SGLang's req_to_token rows)
hand one slot per token instead of one block id per block: a slot list is a block table of
block size 1, so the metadata of such a step has `block_size` 1 and `block_tables` are the
slot lists. The kernels then write `slots[num_computed:num_end]` and read
`slots[0:seq_len]`, exactly the indices SGLang's attention backends gather.
Scheduled draft tokens (speculative decoding with acceptance) are rows like any other:
their positions follow the request's tokens and their KV is written through the block
table; `num_draft_tokens[i]` says how many of request i's last rows are drafts, and every
one of its last 1 + num_draft_tokens[i] rows is sampled (`spec_rows`)::

    request D, num_tokens 9, num_computed 8, drafts (d1, d2):  rows 6 7 8
    positions                                                  8  9  10
    input_ids                                                  t8 d1 d2
    sampled rows (target + bonus)                              6  7  8

Hybrid KV cache (several KV-cache groups, EngineConfig.kv_groups): each group has its own
block table per request, and each row writes its K/V once per group, at the slot of its
position through that group's table (`group_slot_mappings[g]`; group 0's is
`slot_mapping`). A sliding-window group's table may hold vLLM's null block (0) or a block
already freed for positions before the window; the kernel never reads them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from collections.abc import Collection, Sequence
from dataclasses import MISSING, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from schedcheck.engines.protocol import KVCacheGroup, ScheduledRequest, SchedulerOutput
from schedcheck.engines.slots import gather_slots, rows_of

IntArray = npt.NDArray[np.int64]
_EMPTY: IntArray = np.zeros(0, dtype=np.int64)
FULL_ONLY = (KVCacheGroup("full"),)


@dataclass(frozen=True)
class RunnerMetadata:
    """Attention metadata of one step (vLLM: CommonAttentionMetadata + input batch)."""

    output: SchedulerOutput
    block_size: int
    req_ids: tuple[str, ...]
    num_computed_tokens: IntArray  # (B,) counts
    query_start_loc: IntArray  # (B+1,) indices into the flattened rows
    seq_lens: IntArray  # (B,) counts: attention key length per request
    positions: IntArray  # (T,) indices into each request's tokens
    input_ids: IntArray  # (T,)
    slot_mapping: IntArray  # (T,) where each row's K/V is written
    logits_indices: IntArray  # (S,) flattened row that samples, in batch order
    sampling_req_ids: tuple[str, ...]  # (S,) the request of each logits row
    # (B,) the block tables the kernels read keys through: the scheduled ones
    block_tables: tuple[tuple[int, ...], ...]
    # (L,) draft KV writes after sampling: the position, its slot (-1: past the block table)
    # and the batch index of its request; empty without speculative decoding
    lookahead_positions: IntArray = field(default_factory=lambda: _EMPTY)
    lookahead_slot_mapping: IntArray = field(default_factory=lambda: _EMPTY)
    lookahead_req: IntArray = field(default_factory=lambda: _EMPTY)
    # (B,) draft tokens scheduled per request (its last rows); empty: none in this step
    num_draft_tokens: IntArray = field(default_factory=lambda: _EMPTY)
    # the KV-cache groups; per group g >= 1: its (B,) block tables and (T,) slot mapping
    kv_groups: tuple[KVCacheGroup, ...] = FULL_ONLY
    group_block_tables: tuple[tuple[tuple[int, ...], ...], ...] = ()
    group_slot_mappings: tuple[IntArray, ...] = ()
    # False / True only for metadata derived otherwise than documented above (a runner bug,
    # re-created on purpose by the reference engine's catalog)
    slot_mapping_from_block_table: bool = True
    seq_lens_mutated: bool = False
    block_tables_mutated: bool = False

    @property
    def as_documented(self) -> bool:
        """True iff slot_mapping, seq_lens and block_tables are derived as documented."""
        return (
            self.slot_mapping_from_block_table
            and not self.seq_lens_mutated
            and not self.block_tables_mutated
        )

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    @property
    def num_tokens(self) -> int:
        """Count of flattened rows T (total scheduled tokens)."""
        return int(self.positions.size)

    @property
    def query_lens(self) -> IntArray:
        return np.diff(self.query_start_loc)

    def tables_of_group(self, group: int) -> tuple[tuple[int, ...], ...]:
        """(B,) the block tables of KV-cache group `group` (0: block_tables)."""
        return self.block_tables if group == 0 else self.group_block_tables[group - 1]

    def slots_of_group(self, group: int) -> IntArray:
        """(T,) where each row's K/V of KV-cache group `group` is written."""
        return self.slot_mapping if group == 0 else self.group_slot_mappings[group - 1]

    @property
    def spec_rows(self) -> IntArray:
        """(S',) every sampled row of the requests with drafts: their last 1 + K rows."""
        if self.num_draft_tokens.size == 0:
            return _EMPTY
        starts = self.query_start_loc.tolist()
        rows: list[int] = []
        for i, num_drafts in enumerate(self.num_draft_tokens.tolist()):  # bounded: B
            if num_drafts > 0:
                end = starts[i + 1]
                rows += range(max(end - num_drafts - 1, starts[i]), end)
        return np.array(rows, dtype=np.int64)

    def batch_mask(self, batch_indices: Collection[int]) -> npt.NDArray[np.bool_]:
        """(B,) True at each of the given batch indices (a gather of it marks their rows)."""
        mask = np.zeros(self.num_reqs, dtype=np.bool_)
        mask[list(batch_indices)] = True
        return mask

    @functools.cached_property
    def row_req(self) -> IntArray:
        """(T,) the batch index of the request each flattened row belongs to."""
        return np.repeat(np.arange(self.num_reqs, dtype=np.int64), self.query_lens)

    @functools.cached_property
    def block_table_array(self) -> IntArray:
        """(B, max_blocks) block ids, padded with -1; built only when asked for."""
        tables = self.block_tables
        width = max((len(t) for t in tables), default=0)
        out = np.full((len(tables), width), -1, dtype=np.int64)
        for i, table in enumerate(tables):
            out[i, : len(table)] = table
        return out


def build_metadata(
    output: SchedulerOutput,
    block_size: int,
    *,
    num_lookahead_tokens: int = 0,
    max_model_len: int | None = None,
    kv_groups: tuple[KVCacheGroup, ...] = FULL_ONLY,
) -> RunnerMetadata:
    """Derive the runner metadata of one step, as documented in the module docstring.

    `num_lookahead_tokens` draft positions follow each sampling request's tokens, capped at
    `max_model_len` (as vLLM's drafter pads positions past it); `kv_groups`: the engine's.
    The per-request numbers are read into lists once; the per-row arrays are built by
    `slots.rows_of` and `slots.gather_slots`, each picking lists or arrays by size."""
    assert block_size >= 1 and num_lookahead_tokens >= 0
    reqs = output.scheduled
    computed = [r.num_computed_tokens for r in reqs]
    counts = [r.num_scheduled_tokens for r in reqs]
    assert min(counts, default=1) >= 1, "every scheduled request runs at least one token"
    starts = list(itertools.accumulate(counts, initial=0))  # query_start_loc
    positions, row_req = rows_of(computed, counts, starts)
    tables, block_size = _read_tables(reqs, block_size, num_lookahead_tokens)
    slot_mapping = gather_slots(tables, computed, counts, block_size)
    input_ids = np.concatenate([r.token_ids for r in reqs]) if reqs else np.zeros(0, dtype=np.int64)
    seq_lens = list(map(operator.add, computed, counts))
    # r.samples, in C: the chunk reaches num_tokens (+ the drafts it runs past them)
    sample_ends = [r.num_tokens + len(r.spec_token_ids) for r in reqs]
    sampling = list(itertools.compress(range(len(reqs)), map(operator.eq, seq_lens, sample_ends)))
    lookahead = _lookahead(reqs, sampling, num_lookahead_tokens, max_model_len, block_size)
    meta = _runner_metadata(
        output=output,
        block_size=block_size,
        req_ids=tuple([r.request_id for r in reqs]),
        num_computed_tokens=np.array(computed, dtype=np.int64),
        query_start_loc=np.array(starts, dtype=np.int64),
        seq_lens=np.array(seq_lens, dtype=np.int64),
        positions=positions,
        input_ids=input_ids.astype(np.int64, copy=False),
        slot_mapping=slot_mapping,
        logits_indices=np.array([starts[i + 1] - 1 for i in sampling], dtype=np.int64),
        sampling_req_ids=tuple([reqs[i].request_id for i in sampling]),
        block_tables=tuple(tables),
        lookahead_positions=lookahead[0],
        lookahead_slot_mapping=lookahead[1],
        lookahead_req=lookahead[2],
        **_drafts_and_groups(reqs, kv_groups, computed, counts, block_size),
    )
    meta.__dict__["row_req"] = row_req  # computed already: seed the cached property
    return meta


_FIELDS = dataclasses.fields(RunnerMetadata)
_FIELD_NAMES = frozenset(f.name for f in _FIELDS)


def _default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default value (a factory's: the one shared empty array); MISSING for a
    field the caller must give."""
    factory = f.default_factory
    return factory() if callable(factory) else f.default


_DEFAULTS = {f.name: d for f in _FIELDS if (d := _default_of(f)) is not MISSING}


def _runner_metadata(**values: Any) -> RunnerMetadata:
    """RunnerMetadata(**values), built without the frozen dataclass' __init__, which sets
    each of its 22 fields through object.__setattr__ (4.7 us a step; this 2.5 us). The same
    fields, defaults filled in; frozen from here on as any RunnerMetadata."""
    meta: RunnerMetadata = object.__new__(RunnerMetadata)
    fields = meta.__dict__
    fields.update(_DEFAULTS)
    fields.update(values)
    assert fields.keys() == _FIELD_NAMES, sorted(fields.keys() ^ _FIELD_NAMES)  # none missing
    return meta


def _drafts_and_groups(
    reqs: Sequence[ScheduledRequest],
    kv_groups: tuple[KVCacheGroup, ...],
    slot_starts: list[int],
    counts: list[int],
    block_size: int,
) -> dict[str, Any]:
    """The draft counts, and per KV-cache group g >= 1 the (B,) block tables and the (T,)
    slot mapping of the rows through that group's tables (empty with one group)."""
    drafts = [len(r.spec_token_ids) for r in reqs]
    num_draft_tokens = np.array(drafts, dtype=np.int64) if any(drafts) else _EMPTY
    if len(kv_groups) == 1:  # most steps: no other group's tables or slots
        return {"num_draft_tokens": num_draft_tokens, "kv_groups": kv_groups}
    tables = tuple(tuple([r.group_table(g) for r in reqs]) for g in range(1, len(kv_groups)))
    return {
        "num_draft_tokens": num_draft_tokens,
        "kv_groups": kv_groups,
        "group_block_tables": tables,
        "group_slot_mappings": tuple(
            gather_slots(t, slot_starts, counts, block_size) for t in tables
        ),
    }


def _lookahead(
    reqs: Sequence[ScheduledRequest],
    sampling: list[int],
    num_lookahead_tokens: int,
    max_model_len: int | None,
    block_size: int,
) -> tuple[IntArray, IntArray, IntArray]:
    """(positions, slots, batch indices) of the draft KV each sampling request writes:
    positions [num_end_tokens, num_end_tokens + k), capped at max_model_len."""
    if num_lookahead_tokens == 0:
        return _EMPTY, _EMPTY, _EMPTY
    cap = max_model_len if max_model_len is not None else np.iinfo(np.int64).max
    drafts = [(i, reqs[i].num_end_tokens) for i in sampling]
    drafts = [(i, start) for i, start in drafts if start < cap]
    if not drafts:
        return _EMPTY, _EMPTY, _EMPTY
    batch_index = [i for i, _ in drafts]
    starts = [start for _, start in drafts]
    counts = [min(num_lookahead_tokens, cap - start) for start in starts]
    slots = gather_slots([reqs[i].block_table for i in batch_index], starts, counts, block_size)
    # draft d's rows are its positions start .. start + count - 1, as a chunk's rows are
    positions, rows = rows_of(starts, counts, list(itertools.accumulate(counts, initial=0)))
    batch = np.array(batch_index, dtype=np.int64)[rows]
    return positions, slots, batch


def _read_tables(
    reqs: Sequence[ScheduledRequest], block_size: int, num_lookahead_tokens: int
) -> tuple[list[tuple[int, ...]], int]:
    """(the tables the kernels read through, their block size): the block tables, or the
    per-token slot lists as tables of block size 1. An engine hands slots for all requests
    of a step or for none."""
    if not reqs or reqs[0].slots is None:
        return [r.block_table for r in reqs], block_size
    assert num_lookahead_tokens == 0, "draft KV through slot lists is not modelled"
    lists = [r.slots for r in reqs]
    assert all(s is not None for s in lists), "a step mixes slot lists and block tables"
    return [s for s in lists if s is not None], 1
