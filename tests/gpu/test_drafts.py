"""Speculative decoding in the tensor replay, on hand-built schedules (block size 4).

The drafter's lookahead KV and scheduled draft tokens (speculative decoding with
acceptance) write KV that is not the true KV of its position, by design: the replay must
not report that, and must report any read of it before its owner rewrites it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.gpu.backends.torch_ref import TorchRefBackend
from schedcheck.gpu.baseline import run_baseline
from schedcheck.gpu.checks import ReplayChecker
from schedcheck.gpu.executor import TensorExecutor
from schedcheck.gpu.findings import Finding, first_per_request
from schedcheck.gpu.model import ModelConfig, make_model
from schedcheck.gpu.replay import replay_schedule
from schedcheck.gpu.tolerances import tolerance_for

BS, NUM_BLOCKS, VOCAB = 4, 32, 512
TokenArray = np.ndarray


@pytest.fixture(scope="module")
def model():
    return make_model(ModelConfig(vocab_size=VOCAB), seed=0)


def _seq(seed: int, n: int) -> TokenArray:
    return np.random.default_rng(seed).integers(3, VOCAB, size=n, dtype=np.int64)


def _req(
    rid: str,
    seq: TokenArray,
    computed: int,
    num_tokens: int,
    table: tuple[int, ...],
    drafts: tuple[int, ...] = (),
) -> ScheduledRequest:
    """Rows [computed, num_tokens) of the true `seq`, then `drafts` after them."""
    chunk = np.concatenate([seq[computed:num_tokens], np.asarray(drafts, dtype=np.int64)])
    return ScheduledRequest(
        rid, computed, chunk.size, num_tokens, num_tokens, chunk, table, spec_token_ids=drafts
    )


def _replay(
    model,
    schedule: Sequence[SchedulerOutput],
    sequences: Mapping[str, TokenArray],
    num_lookahead_tokens: int = 0,
) -> tuple[ReplayChecker, TensorExecutor]:
    backend = TorchRefBackend()
    baseline = run_baseline(model, backend, sequences)
    tol = tolerance_for("fp32")
    checker = ReplayChecker(baseline, model, tol, (NUM_BLOCKS + 1) * BS)
    executor = TensorExecutor(model, backend, BS, NUM_BLOCKS, observer=checker)
    executor.set_true_tokens(sequences)
    replay_schedule(schedule, executor, BS, num_lookahead_tokens=num_lookahead_tokens)
    return checker, executor


def _first(findings: list[Finding]) -> dict[str, tuple]:
    return {
        r: (f.kind, f.step, f.position, f.slot, f.layer)
        for r, f in first_per_request(findings).items()
    }


def test_a_lookahead_write_into_verified_kv_is_read_at_its_key(model) -> None:
    """A (4 tokens, table (1, 5)) samples at step 0 and its drafter writes position 4 into
    slot 5*4+0, which B verified at step 0 as its key 0; B's decode at step 1 reads it
    again: a kv-read at B's key 0, layer 0 (the read ledger counts the drafter's writes)."""
    a, b = _seq(1, 5), _seq(2, 9)
    schedule = [
        SchedulerOutput(0, (_req("A", a, 0, 4, (1, 5)), _req("B", b, 0, 8, (5, 6, 7)))),
        SchedulerOutput(1, (_req("B", b, 8, 9, (5, 6, 7)),)),
    ]
    checker, executor = _replay(model, schedule, {"A": a, "B": b}, num_lookahead_tokens=1)
    assert executor.findings == []
    assert _first(checker.findings) == {"B": ("kv-read", 1, 0, 20, 0)}
