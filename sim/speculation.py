"""Speculative decoding, wired: the drafter's drafts to the engine, the executor's
acceptance back to the engine and to the accounting.

A run with num_speculative_tokens K > 0 needs an engine that schedules drafts
(`SpecDecodeEngine`) and an executor that verifies them (`DraftVerifier`: its rejection
sampler). Around one step::

    after step N    the drafter proposes K drafts for every request that sampled and still
                    runs -> engine.update_draft_token_ids (vLLM: EngineCore.post_step)
    step N+1        the engine schedules them; the executor accepts a prefix of them and
                    samples a bonus token after it
    update(N+1)     engine.update_from_output(output, sampled, accepted); each request's
                    next chunk must start after its last accepted draft (the accounting
                    moves back by the rejected ones: their KV is recomputed, never kept)

Under async scheduling the model runner keeps its drafter's proposals for the next step
itself (sim/pipelined.py); the engine learns them only as placeholders.
"""

from __future__ import annotations

from collections.abc import Callable, Container

import numpy as np

from schedcheck.engines.protocol import (
    Engine,
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    SchedulerOutput,
    SpecDecodeEngine,
)
from schedcheck.invariants import hash_model
from schedcheck.invariants.accounting import AccountingChecker
from schedcheck.sim.coverage import Coverage
from schedcheck.sim.drafter import Drafter
from schedcheck.sim.executors import ExecutorParts
from schedcheck.sim.meets import meets
from schedcheck.sim.result import SimOptions, call_engine

Drafts = dict[str, tuple[int, ...]]  # request id -> draft (or accepted) token ids


class Speculation:
    def __init__(
        self,
        engine: SpecDecodeEngine,
        drafter: Drafter,
        accounting: AccountingChecker,
        coverage: Coverage,
    ) -> None:
        self.engine, self.drafter = engine, drafter
        self.accounting, self.coverage = accounting, coverage

    def add_request(self, request: EngineRequest) -> None:
        salt = hash_model.salt_identity(request.cache_salt)
        self.drafter.add_request(request.request_id, request.prompt_token_ids, salt)

    def forget(self, request_id: str) -> None:
        self.drafter.forget(request_id)

    def gained(self, request_id: str, token_ids: tuple[int, ...]) -> None:
        """Tokens the request gained in a step (accepted drafts + the sampled one)."""
        if token_ids:
            self.drafter.append(request_id, token_ids)

    def update_engine(
        self, output: SchedulerOutput, sampled: dict[str, int], accepted: Drafts
    ) -> list[FinishedRequest]:
        update = self.engine.update_from_output
        return call_engine("update_from_output", update, output, sampled, accepted)

    def roll_back_rejected(
        self, output: SchedulerOutput, accepted: Drafts, live: Container[str]
    ) -> None:
        """Each request's next chunk starts after its last accepted draft; coverage."""
        for r in output.scheduled:
            if r.spec_token_ids and r.request_id in live:
                num_accepted = len(accepted.get(r.request_id, ()))
                self.accounting.roll_back(r.request_id, r.num_draft_tokens - num_accepted)
                self.coverage.observe_acceptance(r, num_accepted)

    def propose(self, sampled: dict[str, int], live: Container[str]) -> Drafts:
        """The drafter's proposals for every request that sampled and still runs (the run's
        generator draws them in the order of `sampled`)."""
        running = [rid for rid in sampled if rid in live]
        return self.drafter.propose(running) if running else {}

    def hand_to_engine(self, drafts: Drafts) -> None:
        """The proposals, to the engine for its next schedule (vLLM: EngineCore.post_step
        -> Scheduler.update_draft_token_ids)."""
        if drafts:
            call_engine("update_draft_token_ids", self.engine.update_draft_token_ids, drafts)


def make_speculation(
    config: EngineConfig,
    options: SimOptions,
    engine: Engine,
    executor: ExecutorParts,
    rng: Callable[[], np.random.Generator],
    accounting: AccountingChecker,
    coverage: Coverage,
) -> Speculation | None:
    """Speculative decoding with acceptance, or None (K = 0); a ValueError where the engine
    or the executor cannot take part (the CLI's exit 2)."""
    k = config.num_speculative_tokens
    if k == 0:
        return None
    if not meets(engine, SpecDecodeEngine):
        raise ValueError(
            f"num_speculative_tokens={k}: engine {engine.name!r} does not schedule "
            "draft tokens (no update_draft_token_ids)"
        )
    if executor.drafts is None:  # symbolic and tensor verify drafts
        raise ValueError(
            f"num_speculative_tokens={k}: executor {options.executor!r} does not "
            "verify drafts (use symbolic or tensor)"
        )
    drafter = Drafter(k, options.draft_acceptance, rng(), options.vocab_size)
    return Speculation(engine, drafter, accounting, coverage)
