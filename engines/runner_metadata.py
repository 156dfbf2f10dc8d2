"""Runner metadata an engine hands itself (its own model runner's), and its check.

By default the simulator derives a step's runner metadata (`metadata.build_metadata`). An
engine with a model runner of its own (vLLM's whole engine, `--engine vllm-engine`, or
yours) may hand the metadata its runner really gave its kernels (`RunnerMetadataEngine`);
the shadow KV then checks that, and `disagreements` lists where it differs from the
derivation, reported as `DISAGREES` violations by the loop (`step_metadata`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from schedcheck.engines.metadata import IntArray, RunnerMetadata, build_metadata
from schedcheck.engines.protocol import Engine, SchedulerOutput


def disagreements(handed: RunnerMetadata, derived: RunnerMetadata) -> list[tuple[str, str]]:
    """Where an engine's own runner metadata (`handed`, see protocol.RunnerMetadataEngine)
    differs from the metadata derived here from the same SchedulerOutput: (request id,
    what differs), the first difference of each field. Either side may be wrong: a runner
    bug, or a derivation here that does not model the runner. Block tables are compared
    on the entries the kernel reads (ceil(seq_len / block_size) per request); logits
    indices per request that samples."""
    if handed.req_ids != derived.req_ids:
        return [
            ("", f"batch order: runner {list(handed.req_ids)}, derived {list(derived.req_ids)}")
        ]
    out: list[tuple[str, str]] = []
    per_request = ("query_start_loc", "seq_lens")
    per_row = ("positions", "input_ids", "slot_mapping")
    for name in (*per_request, *per_row, "logits_indices"):  # bounded: six fields
        mine, theirs = getattr(derived, name), getattr(handed, name)
        if mine.shape != theirs.shape or (mine != theirs).any():
            out.append(_first_difference(name, handed, theirs, mine, name in per_row))
    for i, rid in enumerate(handed.req_ids):  # bounded: the batch
        width = -(-int(handed.seq_lens[i]) // handed.block_size)
        theirs_t, mine_t = handed.block_tables[i][:width], derived.block_tables[i][:width]
        if theirs_t != mine_t:
            out.append((rid, f"block_table: runner {list(theirs_t)}, derived {list(mine_t)}"))
            break
    return out


def _first_difference(
    name: str, handed: RunnerMetadata, theirs: IntArray, mine: IntArray, per_row: bool
) -> tuple[str, str]:
    n = min(theirs.size, mine.size)
    diff = np.flatnonzero(theirs[:n] != mine[:n])
    k = int(diff[0]) if diff.size else n
    if name == "logits_indices":  # one per request that samples
        sampling = handed.sampling_req_ids
        rid = sampling[min(k, len(sampling) - 1)] if sampling else ""
    elif per_row and handed.num_reqs:
        rid = handed.req_ids[int(handed.row_req[min(k, handed.row_req.size - 1)])]
    else:
        rid = handed.req_ids[min(k, handed.num_reqs - 1)] if handed.num_reqs else ""
    got = int(theirs[k]) if k < theirs.size else "none"
    want = int(mine[k]) if k < mine.size else "none"
    return rid, f"{name}[{k}]: runner {got}, derived {want}"


@runtime_checkable
class RunnerMetadataEngine(Engine, Protocol):
    """Optional protocol: an engine that runs its own model runner hands its metadata.

    By default the simulator derives a step's runner metadata from its SchedulerOutput
    (`build_metadata`, as a model runner would). An engine with a runner of its own (vLLM's
    whole engine, `--engine vllm-engine`, or yours) may instead hand, per step, the
    metadata its runner really gave its attention kernels: a `RunnerMetadata` (positions,
    input_ids, slot_mapping, query_start_loc, seq_lens, block_tables, logits indices) whose
    `output` is the SchedulerOutput schedule() returned, with its requests in the runner's
    batch order. The shadow KV then checks that metadata, so a bug between the scheduler's
    decision and the kernel's indices is seen; `disagreements` says where it differs from
    the derivation. None: derive it as usual."""

    def runner_metadata(self, step: int) -> RunnerMetadata | None:
        """The runner's metadata of step `step` (the output schedule() just returned)."""
        ...


# the violation a disagreement is reported as (invariants/catalog.py)
DISAGREES = "shadow-kv.runner-metadata-disagrees"


def step_metadata(
    engine: object,
    output: SchedulerOutput,
    block_size: int,
    **derive: Any,
) -> tuple[RunnerMetadata, list[tuple[str, str]]]:
    """The metadata the kernels of this step ran with, and where it disagrees with ours.

    An engine that hands its runner's metadata (`RunnerMetadataEngine`) is checked on
    that; then the derivation here (`build_metadata(output, block_size, **derive)`) is
    compared with it (`disagreements`). Any other engine: the derivation, no comparison."""
    derived = build_metadata(output, block_size, **derive)
    hand = getattr(engine, "runner_metadata", None)
    handed = hand(output.step) if hand is not None else None
    if handed is None:
        return derived, []
    return handed, disagreements(handed, derived)
