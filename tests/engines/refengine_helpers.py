"""Helpers for the reference-engine tests: request builders, a step helper, and a minimal
shadow-KV driver (a stand-in for the simulator's symbolic executor).

The driver keeps a shadow KV cache: slot -> identity of the KV entry written there. The
identity of position p of a request is a polynomial hash of its true tokens [0..p], so two
requests with the same prefix write the same identity (prefix sharing is legal) and any
misalignment reads a wrong one. Every scheduled chunk first writes its positions through
the runner metadata's slot_mapping, then reads positions [0, seq_len) through its block
table; a sampling request's token is a fixed integer mix of what it read. When every read
is right, the token is a function of the request's content only (never of its id or of
the schedule), so a correct engine emits `ideal_outputs(prompt, max_tokens)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    SchedulerOutput,
)
from schedcheck.engines.reference.engine import ReferenceEngine, make_engine
from schedcheck.engines.reference.mutants import apply_runner_mutant

BLOCK_MANAGERS = ("hashed", "radix")
VOCAB_SIZE = 1_000
MAX_LEN = 1 << 14
_BASE = np.uint64(0x9E3779B97F4A7C15)
with np.errstate(over="ignore"):
    _POWERS = np.cumprod(np.full(MAX_LEN, _BASE, dtype=np.uint64), dtype=np.uint64)
_WEIGHTS = np.random.default_rng(20260).integers(1, 1 << 62, MAX_LEN, dtype=np.uint64) | 1


def tokens(*values: int | Sequence[int]) -> np.ndarray:
    """A read-only int64 token array from ints and sequences of ints."""
    flat: list[int] = []
    for value in values:
        flat.extend([value] if isinstance(value, int) else value)
    array = np.asarray(flat, dtype=np.int64)
    array.flags.writeable = False
    return array


def request(
    request_id: str,
    prompt: Sequence[int] | np.ndarray,
    max_tokens: int = 1,
    *,
    priority: int = 0,
    arrival_time_s: float = 0.0,
    cache_salt: str | None = None,
) -> EngineRequest:
    prompt_array = np.asarray(prompt, dtype=np.int64)
    prompt_array.flags.writeable = False
    return EngineRequest(
        request_id=request_id,
        prompt_token_ids=prompt_array,
        max_tokens=max_tokens,
        arrival_time_s=arrival_time_s,
        priority=priority,
        cache_salt=cache_salt,
    )


def engine(block_manager: str = "hashed", **options: object) -> ReferenceEngine:
    """A reference engine with small defaults: block_size 4, 10 blocks, budget 64."""
    extra = dict(options.pop("extra", {}) or {})  # type: ignore[call-overload]
    defaults: dict[str, object] = {
        "block_size": 4,
        "num_gpu_blocks": 10,
        "max_num_batched_tokens": 64,
        "max_num_seqs": 16,
        "max_model_len": 4096,
    }
    defaults.update(options)
    config = EngineConfig(block_manager=block_manager, extra=extra, **defaults)  # type: ignore[arg-type]
    return make_engine(config)


def fake_token(scheduled_num_end_tokens: int) -> int:
    return 500 + scheduled_num_end_tokens % 100


def step(
    eng: ReferenceEngine, sampled: Mapping[str, int] | None = None
) -> tuple[SchedulerOutput, list[FinishedRequest]]:
    """One schedule + update; sampling requests get `sampled[id]` or a fixed fake token."""
    output = eng.schedule()
    tokens_out = {
        r.request_id: (sampled or {}).get(r.request_id, fake_token(r.num_end_tokens))
        for r in output.scheduled
        if r.samples
    }
    finished = eng.update_from_output(output, tokens_out)
    return output, finished


def summary(output: SchedulerOutput) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """(id, num_computed_tokens, num_scheduled_tokens, block_table) per scheduled request."""
    return [
        (r.request_id, r.num_computed_tokens, r.num_scheduled_tokens, r.block_table)
        for r in output.scheduled
    ]


def by_id(output: SchedulerOutput) -> dict[str, object]:
    return {r.request_id: r for r in output.scheduled}


def prefix_identities(all_tokens: np.ndarray) -> np.ndarray:
    """identity[p] = sum_{i<=p} (token_i + 1) * BASE^(i+1) mod 2^64 (content and position)."""
    n = all_tokens.size
    with np.errstate(over="ignore"):
        terms = (all_tokens.astype(np.uint64) + np.uint64(1)) * _POWERS[:n]
        return np.cumsum(terms, dtype=np.uint64)


def mix_token(identities: np.ndarray) -> int:
    with np.errstate(over="ignore"):
        value = int(np.sum(identities * _WEIGHTS[: identities.size], dtype=np.uint64))
    return (value >> 23) % VOCAB_SIZE


def ideal_outputs(prompt: np.ndarray, max_tokens: int) -> list[int]:
    """What a correct engine emits under the shadow driver: depends on content only."""
    all_tokens = list(prompt.tolist())
    out: list[int] = []
    for _ in range(max_tokens):
        token = mix_token(prefix_identities(np.asarray(all_tokens, dtype=np.int64)))
        out.append(token)
        all_tokens.append(token)
    return out


@dataclass
class ShadowDriver:
    """Drives an engine step by step with a shadow KV cache (see the module docstring)."""

    eng: ReferenceEngine
    block_size: int
    num_blocks: int
    mutant: str | None = None
    slots: np.ndarray = field(init=False)
    true_tokens: dict[str, list[int]] = field(default_factory=dict)
    finished: dict[str, FinishedRequest] = field(default_factory=dict)
    read_errors: list[str] = field(default_factory=list)
    num_steps: int = 0

    def __post_init__(self) -> None:
        self.slots = np.zeros(self.num_blocks * self.block_size, dtype=np.uint64)

    def add(self, req: EngineRequest) -> None:
        self.true_tokens[req.request_id] = req.prompt_token_ids.tolist()
        self.eng.add_request(req)

    def abort(self, request_id: str) -> None:
        self.eng.abort_request(request_id)

    def step(self) -> SchedulerOutput:
        output = self.eng.schedule()
        metadata = apply_runner_mutant(build_metadata(output, self.block_size), self.mutant)
        sampled: dict[str, int] = {}
        for index, sched in enumerate(output.scheduled):
            rid = sched.request_id
            truth = np.asarray(self.true_tokens[rid], dtype=np.int64)
            ids = prefix_identities(truth)
            start = int(metadata.query_start_loc[index])
            stop = int(metadata.query_start_loc[index + 1])
            positions = metadata.positions[start:stop]
            if not np.array_equal(sched.token_ids, truth[positions[positions < truth.size]]):
                self.read_errors.append(f"step {output.step} {rid}: chunk token ids differ")
            write_slots = metadata.slot_mapping[start:stop]
            if (write_slots < 0).any() or (positions >= truth.size).any():
                self.read_errors.append(f"step {output.step} {rid}: write past the block table")
            ok = (write_slots >= 0) & (positions < truth.size)
            self.slots[write_slots[ok]] = ids[positions[ok]]
            read = self._read(sched.block_table, int(metadata.seq_lens[index]))
            expected = ids[: read.size]
            if read.size != int(metadata.seq_lens[index]) or not np.array_equal(read, expected):
                self.read_errors.append(f"step {output.step} {rid}: attention read wrong KV")
            if sched.samples:
                sampled[rid] = mix_token(read)
        for finished in self.eng.update_from_output(output, sampled):
            self.finished[finished.request_id] = finished
        for rid, token in sampled.items():
            if rid in self.true_tokens and rid not in self.finished:
                self.true_tokens[rid].append(token)
        for rid in output.finished_req_ids:
            self.true_tokens.pop(rid, None)
        self.num_steps += 1
        return output

    def _read(self, block_table: tuple[int, ...], seq_len: int) -> np.ndarray:
        positions = np.arange(seq_len, dtype=np.int64)
        logical = positions // self.block_size
        table = np.asarray(block_table, dtype=np.int64)
        inside = logical < table.size
        slots = table[logical[inside]] * self.block_size + positions[inside] % self.block_size
        return self.slots[slots]

    def run(self, steps_max: int) -> None:
        while self.eng.has_unfinished_requests() and self.num_steps < steps_max:
            self.step()
