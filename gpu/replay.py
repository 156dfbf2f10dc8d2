"""Replay a recorded schedule on the tensor executor, teacher-forced.

Every step runs exactly the chunk token ids of the schedule (not the executor's own
samples); the runner metadata is rebuilt from each SchedulerOutput with the bundle's
metadata mutant, as the run that recorded it did:

    for each SchedulerOutput (bounded by the schedule's length):
        finished_req_ids  -> executor.finish_request   (the oracle forgets them)
        build_metadata(output, block_size, lookahead) -> runner mutant [-> transform]
            -> executor.execute

`Recorder` is an observer that keeps what a replay produced: the logits of every sampled
row and the K/V every row wrote, per (request, position), on the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from schedcheck.engines.metadata import RunnerMetadata, build_metadata
from schedcheck.engines.protocol import SchedulerOutput
from schedcheck.engines.reference.mutants import apply_runner_mutant
from schedcheck.gpu.executor import KV, StepObserver, TensorExecutor

Transform = Callable[[RunnerMetadata], RunnerMetadata]


@dataclass
class ReplayStats:
    steps: int = 0
    tokens: int = 0
    sampled: int = 0
    replay_s: float = 0.0


def replay_schedule(
    schedule: Sequence[SchedulerOutput],
    executor: TensorExecutor,
    block_size: int,
    mutant: str | None = None,
    transform: Transform | None = None,
    *,
    num_lookahead_tokens: int = 0,
    max_model_len: int | None = None,
) -> ReplayStats:
    stats = ReplayStats()
    start = time.perf_counter()
    for output in schedule:
        for rid in output.finished_req_ids:
            executor.finish_request(rid)
        if not output.scheduled:
            continue
        metadata = build_metadata(
            output,
            block_size,
            num_lookahead_tokens=num_lookahead_tokens,
            max_model_len=max_model_len,
        )
        metadata = apply_runner_mutant(metadata, mutant)
        if transform is not None:
            metadata = transform(metadata)
        executor.execute(metadata)
        stats.steps += 1
        stats.tokens += metadata.num_tokens
        stats.sampled += len(metadata.sampling_req_ids)
    stats.replay_s = time.perf_counter() - start
    return stats


@dataclass
class Recorder:
    """Observer: samples[(step, request, position)] = logits row (fp64, host) of every
    sample row (with drafts: rejected ones too);
    kv[(request, position)] = [(step, K (L, Hk, D), V (L, Hk, D)), ...] in write order."""

    samples: dict[tuple[int, str, int], torch.Tensor] = field(default_factory=dict)
    kv: dict[tuple[str, int], list[tuple[int, torch.Tensor, torch.Tensor]]] = field(
        default_factory=dict
    )

    def on_step(self, plan, tensors, written: list[KV], hidden, logits, tokens, executor) -> None:
        md = plan.metadata
        keys = torch.stack([k for k, _ in written], dim=1).to("cpu", torch.float64)
        values = torch.stack([v for _, v in written], dim=1).to("cpu", torch.float64)
        for t, (i, pos) in enumerate(
            zip(plan.row_request.tolist(), md.positions.tolist(), strict=True)
        ):
            self.kv.setdefault((md.req_ids[i], pos), []).append((plan.step, keys[t], values[t]))
        host = logits.to("cpu", torch.float64)
        for n, row in enumerate(plan.sample_rows.tolist()):
            rid = md.req_ids[plan.row_request[row]]
            self.samples[(plan.step, rid, int(md.positions[row]))] = host[n]


@dataclass
class Observers:
    """Several observers in one (each sees every step, in order)."""

    members: list[StepObserver]

    def on_step(self, *args) -> None:
        for member in self.members:
            member.on_step(*args)


def schedule_block_ids(schedule: Sequence[SchedulerOutput]) -> np.ndarray:
    """Every block id the schedule's block tables name (sorted, unique)."""
    ids = [b for out in schedule for r in out.scheduled for b in r.block_table]
    return np.unique(np.asarray(ids, dtype=np.int64))
