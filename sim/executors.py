"""The executors a run can use, and what the loop may ask of each beyond `Executor`.

An executor runs a step's metadata and samples (engines/executor.py). Some do more, and the
loop asks for each extra once, when the run is set up, through a narrow protocol here:

    executor    reports reads  verifies drafts  block contents  own shadow KV  hash-model tokens
    symbolic    yes            yes              yes             yes            yes
    tensor      yes            yes              yes             no             no
    hash        (never any)    no               no              no             yes

- reports reads (`ReportingExecutor`): `violations`, what the last step's reads found;
- verifies drafts (`DraftVerifier`): `accepted_token_ids`, the drafts the rejection sampler
  accepted in the last step (speculative decoding needs it);
- block contents (`PoolContents`): what the KV of each block is, for the block-pool check
  of cached blocks (none: that part of the check is skipped);
- own shadow KV (`ShadowKV`, the symbolic executor): it also counts the keys it checked,
  answers what a request's KV at a position is, looks a request's block table up in the
  engine on a rare path, reads several KV-cache groups, and is told the steps that run
  nothing (preemptions drop what it verified; discarded requests' KV is written);
- hash-model tokens (`HashModelSampler`): its tokens are the hash model's, so a finished
  request's outputs must be exactly the unchunked ones (invariants/outputs.py);
- forgets samples (`SampleRollback`, all three): async scheduling, when the engine drops a
  step in flight's tokens (SchedulerOutput.dropped_req_ids, sim/pipelined.py).

The tensor executor is loaded lazily by name, so `sim/` never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

import numpy as np

from schedcheck.engines.executor import Executor
from schedcheck.engines.protocol import EngineConfig
from schedcheck.invariants.violation import Violation
from schedcheck.sim.hash_executor import HashModelExecutor
from schedcheck.sim.meets import meets
from schedcheck.sim.result import SimOptions
from schedcheck.sim.symbolic import SymbolicExecutor

TENSOR_EXECUTOR = "schedcheck.gpu.executor:make_executor"
TableLookup = Callable[[str], Sequence[int] | None]


@runtime_checkable
class ReportingExecutor(Executor, Protocol):
    violations: list[Violation]  # what the last step's reads found


@runtime_checkable
class DraftVerifier(Protocol):
    @property
    def accepted_token_ids(self) -> dict[str, tuple[int, ...]]:
        """Request id -> the drafts accepted in the last step (those with drafts only)."""
        ...


@runtime_checkable
class PoolContents(Protocol):
    def block_contents(self, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the KV identity each block ends with, whether the block is complete)."""
        ...


@runtime_checkable
class ShadowKV(ReportingExecutor, DraftVerifier, PoolContents, Protocol):
    num_keys_checked: int
    current_table: TableLookup | None  # set by the loop: the engine's table of a request

    def identity_at(self, request_id: str, position: int, group: int = 0) -> int:
        """The KV identity of `request_id`'s tokens up to `position` (0: unknown)."""
        ...

    def identities_at(self, wheres: Sequence[tuple[str, int, int]]) -> list[int]:
        """identity_at(request_id, position, group) of each, at once."""
        ...


@runtime_checkable
class SampleRollback(Protocol):
    def unsample(self, request_id: str, tokens: tuple[int, ...]) -> None:
        """Forget the request's last sampled `tokens`: the engine dropped them (async
        scheduling: a reset preempted it with a step in flight); they are sampled again."""
        ...


@runtime_checkable
class HashModelSampler(Protocol):
    hash_model_tokens: bool  # its tokens are the hash model's (invariants/hash_model.py)


@dataclass(frozen=True)
class ExecutorParts:
    """One executor, with each of its optional parts (None where it lacks one)."""

    run: ReportingExecutor
    shadow: ShadowKV | None
    drafts: DraftVerifier | None
    pool: PoolContents | None
    hash_model_tokens: bool

    @classmethod
    def of(cls, executor: object) -> ExecutorParts:
        parts = _parts(executor)
        if not parts[0]:
            raise TypeError(f"{type(executor).__name__} is no executor (engines/executor.py)")
        shadow, drafts, pool, sampler = parts[1:]
        return cls(
            cast(ReportingExecutor, executor),
            cast(ShadowKV, executor) if shadow else None,
            cast(DraftVerifier, executor) if drafts else None,
            cast(PoolContents, executor) if pool else None,
            sampler and cast(HashModelSampler, executor).hash_model_tokens,
        )

    def block_contents(self, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.pool is None:  # an executor without a shadow: no content to check
            return np.zeros(block_ids.size, np.uint64), np.ones(block_ids.size, bool)
        return self.pool.block_contents(block_ids)


def _parts(executor: object) -> tuple[bool, bool, bool, bool, bool]:
    """Which protocols the executor meets: an executor, a shadow KV, a draft verifier, a
    pool's contents, a sampler of the hash model (sim/meets.py: once per class for this
    package's executors)."""
    protocols = (ReportingExecutor, ShadowKV, DraftVerifier, PoolContents, HashModelSampler)
    a, b, c, d, e = (meets(executor, p) for p in protocols)
    return a, b, c, d, e


def make_executor(options: SimOptions, config: EngineConfig) -> ExecutorParts:
    """The executor `options.executor` names (a ValueError for an unknown name, or for
    one that cannot read the configuration's KV-cache groups)."""
    if options.executor == "symbolic":
        executor: object = SymbolicExecutor(
            config.num_gpu_blocks, config.block_size, options.vocab_size
        )
    elif options.executor == "hash":
        executor = HashModelExecutor(options.vocab_size)
    elif options.executor == "tensor":
        module_name, _, attr = TENSOR_EXECUTOR.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
        executor = factory(
            block_size=config.block_size,
            num_blocks=config.num_gpu_blocks,
            **dict(options.executor_options),
        )
    else:
        raise ValueError(f"unknown executor {options.executor!r}: use symbolic, hash or tensor")
    parts = ExecutorParts.of(executor)
    if len(config.kv_cache_groups) > 1 and parts.shadow is None:
        raise ValueError(
            f"kv_groups {config.kv_groups!r}: only the symbolic executor reads "
            "several KV-cache groups"
        )
    return parts
