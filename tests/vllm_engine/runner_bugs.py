"""Real bug classes from vLLM's history, planted in vLLM 0.32's runner (test-only).

Each is a patch of one part of vLLM's V1 model runner, in the class of an upstream bug:

    slot-mapping   BlockTable.compute_slot_mapping: a continuing chunk's first row writes
                   one slot early.  vllm#36580 ("Fix _compute_slot_mappings_kernel for
                   chunked prefill": wrong slots for a chunk that continues a request)
    seq-lens       GPUModelRunner._prepare_inputs: the sequence length handed to the
                   kernel for a continuing chunk is one key too long.  vllm#43991 (the
                   attention metadata's sequence length past the request's valid keys:
                   "walk past the valid block-table entries")
    logits-index   GPUModelRunner._prepare_inputs: a continuing chunk's logits index one
                   row early (its last-but-one token's hidden state is sampled).
                   vllm#4139 (chunked prefill: the logits index from the prompt length
                   instead of the chunk's, "use subquery len here")
    condense       InputBatch.condense moves a request down to a freed row without its
                   block table (MultiGroupBlockTable.move_row skipped): it runs on the
                   departed request's table.  vllm#43894 / vllm#48419 (the persistent
                   batch's condense/swap moving a row without all of its state)
    control        BlockTable.compute_slot_mapping run twice: a runner change that
                   changes no index (the negative control)

A "continuing chunk" is a query of more than one token starting past position 0 (a prompt
chunk after the first, or the prefill after a prefix hit); an unchunked, uncached run has
none, so the kernel replay's baseline stays clean.

`apply(name)` patches vLLM's classes process-wide (idempotent per name; `revert()` undoes).
`make_engine` / `make_kernel_engine` are engine factories (`--engine
runner_bugs:make_engine` with this directory on PYTHONPATH) that apply the bug named by
the environment variable SCHEDCHECK_VLLM_RUNNER_BUG before building vLLM's engine; they
run the fuzzer's configs at block sizes CPU_ATTN takes (`kernel_sizes`), so that the
kernel replay of a campaign's bundle runs the same chunks and prefix hits.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable
from typing import Any

from schedcheck.engines.capabilities import declare
from schedcheck.engines.protocol import Engine, EngineConfig
from schedcheck.engines.vllm.engine import factory

ENV = "SCHEDCHECK_VLLM_RUNNER_BUG"
UPSTREAM = {
    "slot-mapping": "vllm#36580",
    "seq-lens": "vllm#43991",
    "logits-index": "vllm#4139",
    "condense": "vllm#43894",
    "control": "",
}
_UNDO: list[Callable[[], None]] = []
_APPLIED: set[str] = set()


def _continuing(query_start_loc: Any, positions: Any, num_reqs: int) -> list[tuple[int, int]]:
    """(request index, first row) of each query of > 1 token starting past position 0."""
    starts = [int(x) for x in query_start_loc[: num_reqs + 1].tolist()]
    return [
        (i, lo)
        for i, (lo, hi) in enumerate(itertools.pairwise(starts))  # bounded: the batch
        if hi - lo > 1 and int(positions[lo]) > 0
    ]


def _patch(owner: Any, name: str, replacement: Any) -> None:
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    _UNDO.append(lambda: setattr(owner, name, original))


def _slot_mapping() -> None:
    from vllm.v1.worker.block_table import BlockTable

    original = BlockTable.compute_slot_mapping

    def compute_slot_mapping(self, num_reqs, query_start_loc, positions):  # type: ignore[no-untyped-def]
        original(self, num_reqs, query_start_loc, positions)
        for _, row in _continuing(query_start_loc, positions, num_reqs):  # bounded: batch
            self.slot_mapping.gpu[row] -= 1

    _patch(BlockTable, "compute_slot_mapping", compute_slot_mapping)


def _prepare_inputs_patch(edit: Callable[[Any, list[tuple[int, int]], Any], None]) -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner._prepare_inputs

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens):  # type: ignore[no-untyped-def]
        out = original(self, scheduler_output, num_scheduled_tokens)
        num_reqs = self.input_batch.num_reqs
        rows = _continuing(self.query_start_loc.cpu, self.positions, num_reqs)
        edit(self, rows, out[0])
        return out

    _patch(GPUModelRunner, "_prepare_inputs", _prepare_inputs)


def _seq_lens() -> None:
    def edit(runner: Any, rows: list[tuple[int, int]], logits_indices: Any) -> None:
        for i, _ in rows:  # bounded: the batch
            runner.seq_lens[i] += 1

    _prepare_inputs_patch(edit)


def _logits_index() -> None:
    def edit(runner: Any, rows: list[tuple[int, int]], logits_indices: Any) -> None:
        for i, _ in rows:  # bounded: the batch
            logits_indices[i] -= 1

    _prepare_inputs_patch(edit)


def _condense() -> None:
    from vllm.v1.worker.block_table import MultiGroupBlockTable

    def move_row(self, src, tgt):  # type: ignore[no-untyped-def]
        return None  # the moved request keeps the table of the row's previous occupant

    _patch(MultiGroupBlockTable, "move_row", move_row)


def _control() -> None:
    from vllm.v1.worker.block_table import BlockTable

    original = BlockTable.compute_slot_mapping

    def compute_slot_mapping(self, num_reqs, query_start_loc, positions):  # type: ignore[no-untyped-def]
        original(self, num_reqs, query_start_loc, positions)
        original(self, num_reqs, query_start_loc, positions)

    _patch(BlockTable, "compute_slot_mapping", compute_slot_mapping)


PATCHES: dict[str, Callable[[], None]] = {
    "slot-mapping": _slot_mapping,
    "seq-lens": _seq_lens,
    "logits-index": _logits_index,
    "condense": _condense,
    "control": _control,
}


def apply(name: str) -> None:
    """Plant bug `name` in vLLM's runner (process-wide; once)."""
    if name in _APPLIED:
        return
    PATCHES[name]()
    _APPLIED.add(name)


def revert() -> None:
    """Undo every planted bug, newest first."""
    while _UNDO:  # bounded: one entry per patch
        _UNDO.pop()()
    _APPLIED.clear()


def _from_env() -> None:
    name = os.environ.get(ENV, "")
    if name:
        apply(name)


def kernel_sizes(config: EngineConfig) -> EngineConfig:
    """The fuzzer's config at the nearest block size vLLM's CPU kernel takes (a multiple
    of 32, the pool's blocks kept: requests that ran together still do): a campaign's
    bundles then replay on CPU_ATTN with the same chunks and prefix hits."""
    from schedcheck.gpu.vllm_engine import kernel_config

    return factory.fit_config(kernel_config(config)[0])


# FCFS (the swarm draws vLLM's options for vllm-engine only): no priorities drawn either,
# so a seed draws the examples it drew before the whole engine took priorities
CAPABILITIES = dataclasses.replace(factory.CAPABILITIES, fit_config=kernel_sizes, priorities=False)


@declare(CAPABILITIES)
def make_engine(config: EngineConfig) -> Engine:
    """vllm-engine (shadow backend) with the bug named by $SCHEDCHECK_VLLM_RUNNER_BUG."""
    _from_env()
    return factory.make_engine(config)


@declare(CAPABILITIES)
def make_kernel_engine(config: EngineConfig) -> Engine:
    """vllm-engine on CPU_ATTN (the kernel replay) with the bug of the environment."""
    _from_env()
    return factory.make_kernel_engine(config)


@declare(factory.CAPABILITIES)
def make_engine_any_block_size(config: EngineConfig) -> Engine:
    """vllm-engine (shadow backend) with the bug of the environment, at the fuzzer's own
    block sizes (1, 2, 4, 16, ...: the shadow backend takes any); its bundles re-run at
    32 in the kernel replay."""
    _from_env()
    return factory.make_engine(config)
