"""Runner mutants: each takes the clean runner metadata of a step (engines/metadata.py
`build_metadata`) and derives again the one field whose derivation it breaks.

They apply to any engine's schedule: the runner is the simulator's, not the engine's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata, gather_slots

RunnerMutant = Callable[[RunnerMetadata], RunnerMetadata]


def slot_mapping_from_zero(meta: RunnerMetadata) -> RunnerMetadata:
    """slot-mapping-from-zero (bug class 12, vllm#36580).

    Clean (`build_metadata`): ``gather_slots(tables, [r.num_computed_tokens ...], ...)``,
    the slots of positions [num_computed_tokens, num_end_tokens) of each chunk. The bug:
    the slots of positions [0, num_scheduled_tokens), so a later chunk overwrites the KV
    of the request's first tokens and its own KV is never written.
    """
    reqs = meta.output.scheduled
    tables = [r.block_table for r in reqs]
    num_scheduled = [r.num_scheduled_tokens for r in reqs]
    slots = gather_slots(tables, [0] * len(reqs), num_scheduled, meta.block_size)
    return _replace(meta, slot_mapping=slots, slot_mapping_from_block_table=False)


def seq_len_full_prompt(meta: RunnerMetadata) -> RunnerMetadata:
    """seq-len-full-prompt (bug class 16, nano-vllm 25794a1).

    Clean: ``seq_lens = num_computed_tokens + num_scheduled_tokens`` (the keys written so
    far). The bug: the key length of a prefill chunk is the whole prompt, so attention
    reads KV slots not written yet.
    """
    reqs = meta.output.scheduled
    seq_lens = np.fromiter(
        (max(r.num_prompt_tokens, r.num_end_tokens) for r in reqs), np.int64, len(reqs)
    )
    return _replace(meta, seq_lens=seq_lens, seq_lens_mutated=True)


def block_table_hits_only(meta: RunnerMetadata) -> RunnerMetadata:
    """block-table-hits-only (bug class 6, vllm#7018).

    Clean: every scheduled request's block table is passed to the kernels. The bug: once a
    request of the step reads KV from before the step (a prefix hit or an earlier chunk),
    only those requests get their block table; the others read through vLLM's padding, a
    table of zeros (its example: ``[[0, 0], [1, 2]]``).
    """
    if not (meta.num_computed_tokens > 0).any():
        return meta
    tables = tuple(
        table if int(n) > 0 else (0,) * len(table)
        for table, n in zip(meta.block_tables, meta.num_computed_tokens, strict=True)
    )
    if tables == meta.block_tables:
        return meta
    return _replace(meta, block_tables=tables, block_tables_mutated=True)


RUNNER_MUTANTS: dict[str, RunnerMutant] = {
    "slot-mapping-from-zero": slot_mapping_from_zero,
    "block-table-hits-only": block_table_hits_only,
    "seq-len-full-prompt": seq_len_full_prompt,
}


def apply_runner_mutant(meta: RunnerMetadata, mutant: str | None) -> RunnerMetadata:
    """The step's metadata as runner mutant `mutant` derives it; unchanged for None or for a
    mutant of another component."""
    transform = RUNNER_MUTANTS.get(mutant) if mutant is not None else None
    return meta if transform is None else transform(meta)


def _replace(meta: RunnerMetadata, **changes: Any) -> RunnerMetadata:
    out = dataclasses.replace(meta, **changes)
    out.__dict__["row_req"] = meta.row_req  # the same rows: keep the cached property
    return out
