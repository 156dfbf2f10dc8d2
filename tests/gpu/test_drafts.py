"""Speculative decoding in the tensor replay, on hand-built schedules (block size 4).

The drafter's lookahead KV and scheduled draft tokens (speculative decoding with
acceptance) write KV that is not the true KV of its position, by design: the replay must
not report that, and must report any read of it before its owner rewrites it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import EngineConfig, ScheduledRequest, SchedulerOutput
from schedcheck.gpu.backends.torch_ref import TorchRefBackend
from schedcheck.gpu.baseline import run_baseline
from schedcheck.gpu.checks import ReplayChecker
from schedcheck.gpu.executor import TensorExecutor
from schedcheck.gpu.findings import Finding, first_per_request
from schedcheck.gpu.model import ModelConfig, make_model
from schedcheck.gpu.replay import replay_schedule
from schedcheck.gpu.tolerances import tolerance_for
from schedcheck.invariants import hash_model
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

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
    checker_type: type[ReplayChecker] = ReplayChecker,
) -> tuple[ReplayChecker, TensorExecutor]:
    backend = TorchRefBackend()
    baseline = run_baseline(model, backend, sequences)
    tol = tolerance_for("fp32")
    checker = checker_type(baseline, model, tol, (NUM_BLOCKS + 1) * BS)
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


class _Judged(ReplayChecker):
    """The checker, keeping (step, request, position) of every sample it judged."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.judged: list[tuple[int, str, int]] = []

    def _judge_sample(self, plan, row, position, *rest) -> None:
        rid = plan.metadata.req_ids[plan.row_request[row]]
        self.judged.append((plan.step, rid, position))
        super()._judge_sample(plan, row, position, *rest)


A = _seq(3, 14)  # A's true tokens: prompt x0..x5, outputs x6..x13
WRONG = (int(A[8]) + 1) % VOCAB, (int(A[9]) + 2) % VOCAB


def _drafts_schedule(*more: SchedulerOutput) -> list[SchedulerOutput]:
    """A prefills 6 tokens (blocks 1, 2), then runs x6 and 3 drafts: x7 (accepted), then
    two wrong ones at positions 8, 9 (rejected); the bonus x8 follows at step 2::

        step 1   position   6    7    8    9       slots 2*4+2 2*4+3 3*4+0 3*4+1
                 input      x6   x7   w8   w9      rejected rows: 8, 9
                 judged     s6   s7   -    -       (s7: the bonus, x8)
    """
    return [
        SchedulerOutput(0, (_req("A", A, 0, 6, (1, 2)),)),
        SchedulerOutput(1, (_req("A", A, 6, 7, (1, 2, 3), (int(A[7]), *WRONG)),)),
        *more,
    ]


def test_rejected_drafts_are_no_findings_and_accepted_samples_are_judged(model) -> None:
    schedule = _drafts_schedule(SchedulerOutput(2, (_req("A", A, 8, 9, (1, 2, 3)),)))
    checker, executor = _replay(model, schedule, {"A": A}, checker_type=_Judged)
    assert isinstance(checker, _Judged)
    assert executor.findings == [] and checker.findings == []
    assert checker.judged == [(0, "A", 5), (1, "A", 6), (1, "A", 7), (2, "A", 8)]
    assert checker.num_sampled == 4
    draft = executor.shadow.slot_identity[[12, 13]]  # rows 8, 9 at step 1; 8 rewritten at 2
    assert draft.tolist() == [executor.shadow.identities("A", A)[8], hash_model.DRAFT]


def test_the_owner_reading_its_rejected_draft_kv_is_a_kv_read(model) -> None:
    """Off by one after the rejection (spec-rollback-off-by-one): step 2 starts at position
    9, so A reads key 8, still w8's KV, which it never rewrote."""
    schedule = _drafts_schedule(SchedulerOutput(2, (_req("A", A, 9, 10, (1, 2, 3)),)))
    checker, executor = _replay(model, schedule, {"A": A})
    assert executor.findings == []
    assert _first(checker.findings) == {"A": ("kv-read", 2, 8, 12, 0)}


def test_another_request_reading_a_rejected_draft_slot_is_a_kv_read(model) -> None:
    """B (prompt x0..x10 + 2, a stale prefix hit on A's blocks 1, 2, 3) reads A's block 3
    at step 2, before A rewrote position 8 there: w8's KV at B's key 8."""
    b = np.concatenate([A[:11], _seq(4, 3)])
    schedule = _drafts_schedule(SchedulerOutput(2, (_req("B", b, 12, 13, (1, 2, 3, 4)),)))
    checker, executor = _replay(model, schedule, {"A": A, "B": b})
    assert executor.findings == []
    assert _first(checker.findings) == {"B": ("kv-read", 2, 8, 12, 0)}


def _live(model) -> TensorExecutor:
    executor = TensorExecutor(model, TorchRefBackend(), BS, NUM_BLOCKS)
    executor.add_request("A", A[:6])
    return executor


def _greedy(model, n: int) -> list[int]:
    """The model's own n greedy tokens after A's prompt, decoded one by one."""
    executor = _live(model)
    table = (1, 2, 3, 4)
    out = [executor.execute(build_metadata(SchedulerOutput(0, (_req("A", A, 0, 6, table),)), BS))]
    for step in range(1, n):
        known = executor.tokens["A"]
        decode = _req("A", known, known.size - 1, known.size, table)
        out.append(executor.execute(build_metadata(SchedulerOutput(step, (decode,)), BS)))
    return [sampled["A"] for sampled in out]


def test_live_drafts_accept_the_matching_prefix_and_extend_the_oracle(model) -> None:
    """Live: drafts (g7, w, g9) after g6: g7 is accepted, w is not (the bonus is g8, the
    model's own token there); then (g9, g10) after g8 are both accepted, bonus g11."""
    g = dict(enumerate(_greedy(model, 6), start=6))  # g[6] .. g[11]
    wrong = (g[8] + 1) % VOCAB
    executor, table = _live(model), (1, 2, 3, 4)
    executor.execute(build_metadata(SchedulerOutput(0, (_req("A", A, 0, 6, table),)), BS))
    known = executor.tokens["A"]
    step1 = _req("A", known, 6, 7, table, (g[7], wrong, g[9]))
    assert executor.execute(build_metadata(SchedulerOutput(1, (step1,)), BS)) == {"A": g[8]}
    assert executor.accepted_token_ids == {"A": (g[7],)}
    assert executor.tokens["A"].tolist() == [*A[:6].tolist(), g[6], g[7], g[8]]
    ids = executor.shadow.identities("A", executor.tokens["A"])
    assert executor.shadow.slot_identity[[11, 12, 13]].tolist() == [
        ids[7],  # position 7 (slot 2*4+3): the accepted g7, true KV now
        hash_model.DRAFT,  # positions 8, 9: rejected
        hash_model.DRAFT,
    ]
    known = executor.tokens["A"]
    step2 = _req("A", known, 8, 9, table, (g[9], g[10]))
    assert executor.execute(build_metadata(SchedulerOutput(2, (step2,)), BS)) == {"A": g[11]}
    assert executor.accepted_token_ids == {"A": (g[9], g[10])}
    assert executor.tokens["A"].tolist() == [*A[:6].tolist(), *g.values()]
    assert executor.findings == [] and executor.violations == []


def _live_run(num_speculative_tokens: int):
    shared = tuple(range(5, 21))
    trace = [TraceRequest("a", 0.0, 12, prompt_token_ids=(*shared, 22, 23)),
             TraceRequest("b", 0.0, 10, prompt_token_ids=(*shared, 40))]  # fmt: skip
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=8,
                          num_speculative_tokens=num_speculative_tokens)  # fmt: skip
    executor_options = {"backend": "torch-ref", "model_config": ModelConfig(vocab_size=VOCAB)}
    options = SimOptions(executor="tensor", executor_options=executor_options,
                         vocab_size=VOCAB, draft_acceptance=0.5)  # fmt: skip
    return run(trace, "reference", config, options)


def test_the_engine_loop_runs_drafts_live_on_the_tensor_executor() -> None:
    """Greedy decoding with drafts yields the tokens it yields without them. The loop's
    drafter proposes the hash model's tokens, which the real model's sampler rejects: every
    step with drafts rolls back (accepted drafts live: the executor test above)."""
    plain = _live_run(0)
    result = _live_run(3)
    assert result.finished == 2 and result.violations == []
    assert result.outputs == plain.outputs
    assert result.coverage["spec-rejected"] == 20
