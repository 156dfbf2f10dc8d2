"""The checks of one step, wired: which invariant runs at which point of a step, on what.

The invariants (`invariants/`) are pure functions and checkers over what they are handed;
this module hands each one its part of a step, at the point where that part is true::

    schedule()        protocol: the output is well formed (nothing derived from it if not)
    before execute    accounting: budget, range, chunk, contiguity, knowledge, blocks
    execute           shadow KV: every read of the step (the executor's own violations)
    update()          protocol: the finished list names requests the engine was given
    after update      accounting: the KV manager agrees on num_computed_tokens;
                      outputs: a request finished by length returned exactly its tokens;
                      block pool: the blocks that changed (a full sweep every Nth step)
    end of run        block pool: a full sweep, and no block is left referenced

A step that runs nothing still preempts (the accounting and the shadow KV drop what those
requests had) and may run discarded requests (SGLang: their KV is written). Under async
scheduling the after-update checks of step N run after step N+1 executed: the drafts the
runner rejected in the steps not yet applied (`unapplied`) are not yet in the engine's
counts.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterator, Mapping
from itertools import compress, repeat

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata, build_metadata
from schedcheck.engines.protocol import EngineConfig, FinishedRequest, KVSnapshot, SchedulerOutput
from schedcheck.invariants import hash_model, pool_reads
from schedcheck.invariants.accounting import AccountingChecker
from schedcheck.invariants.block_pool import ExpectedContent, Named
from schedcheck.invariants.idle import check_idle
from schedcheck.invariants.outputs import check_finished, until_eos
from schedcheck.invariants.pool_delta import PoolDeltaChecker
from schedcheck.invariants.protocol import ProtocolChecker
from schedcheck.invariants.violation import Violation
from schedcheck.sim.executors import ExecutorParts
from schedcheck.sim.kv_events import KVEventRecorder
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.result import RunResult, SimOptions
from schedcheck.sim.symbolic import SymbolicExecutor


class StepChecks:
    def __init__(
        self,
        config: EngineConfig,
        options: SimOptions,
        result: RunResult,
        ledger: Ledger,
        executor: ExecutorParts,
        snapshot: Callable[[], KVSnapshot],
        decodes_within_budget: bool = True,  # the engine's capability (capabilities.py)
    ) -> None:
        self.config, self.options, self.result = config, options, result
        self.ledger, self.executor, self.snapshot = ledger, executor, snapshot
        self.check = options.check_invariants
        self.accounting = AccountingChecker(config, decodes_within_budget)
        self.protocol = ProtocolChecker(config.num_gpu_blocks)
        self.pool = PoolDeltaChecker()
        self.preempted_since_pool_check: set[str] = set()  # membership only
        self.idle_checked_at = -1  # the step before the last idle check
        self.full_sweep_interval = options.pool_check_interval_steps  # 0: at the end only
        self.kv_events = KVEventRecorder() if options.record_kv_events else None
        if executor.shadow is not None:  # its rare path looks a table up in the engine
            executor.shadow.current_table = self._current_table
        if isinstance(executor.run, SymbolicExecutor):  # a waiting request: no prompt kept
            executor.run.prompt_source = ledger.prompt

    def forget(self, request_id: str) -> None:
        self.accounting.forget(request_id)
        self.protocol.forget(request_id)

    # -- a step, in order -------------------------------------------------------------------

    def check_output(self, output: SchedulerOutput) -> list[Violation]:
        """The output is well formed (always checked: the loop derives everything from it)."""
        return self.protocol.check_output(output, self.ledger.live, self.result.outputs)

    def before_execute(self, output: SchedulerOutput) -> list[Violation]:
        self.preempted_since_pool_check.update(output.preempted_req_ids)
        if not self.check:
            return []
        self.result.invariants_checked += 3 + 7 * len(output.scheduled)
        return self.accounting.check_step(output, self.ledger.num_tokens)

    def after_execute(self, meta: RunnerMetadata) -> list[Violation]:
        """The shadow KV's reads of the step (the executor checked them as it ran)."""
        if self.check:
            self.result.invariants_checked += meta.num_tokens  # causal alignment of every row
        return list(self.executor.run.violations)

    def after_update(
        self,
        output: SchedulerOutput,
        finished: list[FinishedRequest],
        unapplied: Mapping[str, int],
        step_index: int,
    ) -> list[Violation]:
        """What update_from_output returned, then (checking) the engine's state after it."""
        live, retired = self.ledger.live, self.result.outputs
        out = self.protocol.check_finished(output.step, finished, live, retired)
        if not self.check:
            return out
        step = output.step
        snapshot = self.snapshot()
        if self.kv_events is not None:
            self.kv_events.observe(step, snapshot)
        for f in finished:
            self.accounting.forget(f.request_id)
        out += self.accounting.check_agreement(step, snapshot.num_computed_tokens(), unapplied)
        for f in finished:
            out += self._check_outputs(step, f)
        return out + self._check_pool(step, snapshot, finished, step_index)

    def empty_step(self, output: SchedulerOutput) -> list[Violation]:
        """A step that runs nothing: its preemptions, and the KV of discarded requests."""
        self.preempted_since_pool_check.update(output.preempted_req_ids)
        out: list[Violation] = []
        shadow = self.executor.shadow
        if output.preempted_req_ids:
            if self.check:
                out += self.accounting.check_step(output, self.ledger.num_tokens)
            if shadow is not None:  # it drops what the preempted requests verified
                bs = self.config.block_size
                shadow.execute(build_metadata(output, bs, kv_groups=self.config.kv_cache_groups))
        if output.discarded and shadow is not None:
            shadow.execute(build_metadata(output, self.config.block_size))  # their KV
            out += shadow.violations
        return out

    def at_end(self, step: int, snapshot: KVSnapshot) -> list[Violation]:
        """Every request has finished: the whole pool, and no block still referenced."""
        if not self.check:
            return []
        out = self.pool.sweep(step, snapshot, set(), self.executor.block_contents)
        return out + check_idle(step, snapshot)

    def idle(self, step: int, snapshot: Callable[[], KVSnapshot]) -> list[Violation]:
        """The engine went idle between arrivals: nothing may stay held (invariants/idle.py).
        Checked once per idle spell (the first wait after step `step`)."""
        if not self.check or self.idle_checked_at == step:
            return []
        self.idle_checked_at = step
        return check_idle(step, snapshot())

    def fill(self, result: RunResult) -> None:
        """The run's counts of what was checked, and the engine's block events (if kept)."""
        if self.executor.shadow is not None:
            result.invariants_checked += self.executor.shadow.num_keys_checked
        if self.kv_events is not None:
            result.kv_events = self.kv_events.events

    # -- the parts --------------------------------------------------------------------------

    def _check_pool(
        self, step: int, snapshot: KVSnapshot, finished: list[FinishedRequest], step_index: int
    ) -> list[Violation]:
        """Every step: the blocks that changed (a full sweep every Nth step if asked)."""
        live: Collection[str] = self.ledger.live.keys()  # a view: no copy of every id
        held = pool_reads.held_between_turns(snapshot)  # sessions' tables, kept by design
        if finished or held:
            gone = {f.request_id for f in finished}.difference(held)
            live = _LiveAfter(self.ledger.live, gone, frozenset(held))
        interval = self.full_sweep_interval
        contents = self.executor.block_contents
        self.pool.full.expected_content = self._expected_content(snapshot)
        if interval and step_index % interval == 0:
            out = self.pool.sweep(step, snapshot, live, contents)
        else:
            preempted = self.preempted_since_pool_check
            out = self.pool.check(step, snapshot, live, contents, preempted)
        self.pool.full.expected_content = None  # the snapshot does not outlive the step
        self.preempted_since_pool_check = set()
        self.result.invariants_checked += 3 * self.pool.num_blocks_checked
        return out

    def _check_outputs(self, step: int, finished: FinishedRequest) -> list[Violation]:
        request = self.ledger.live.get(finished.request_id)
        if request is None or finished.reason not in ("length", "stop"):
            return []
        self.result.invariants_checked += 3
        # async: the runner may sample past max_tokens or the EOS (a step scheduled before
        # the engine saw the last one); the engine must return exactly those before
        eos = self.options.eos_token_id
        sampled = until_eos(self.ledger.sampled[finished.request_id][: request.max_tokens], eos)
        return check_finished(
            step,
            finished,
            request.prompt_token_ids,
            np.asarray(sampled, np.int64),
            request.max_tokens,
            self.options.vocab_size,
            hash_model.salt_identity(request.cache_salt),
            unchunked=self.executor.hash_model_tokens,
            max_model_len=self.config.max_model_len,
            eos_token_id=eos,
        )

    def _expected_content(self, snapshot: KVSnapshot) -> ExpectedContent | None:
        """What each cached hash must hold, where the engine says what its hashes mean
        (the snapshot's optional `hash_positions`: vLLM v1) and the executor knows those
        tokens' KV (its own shadow KV)."""
        positions = getattr(snapshot, "hash_positions", None)  # optional: not in KVSnapshot
        shadow = self.executor.shadow
        if positions is None or shadow is None:
            return None
        identities_at = shadow.identities_at

        def expected(hashes: list[bytes]) -> tuple[np.ndarray, list[Named | None]]:
            named = positions(hashes)
            known = np.fromiter(map(operator.is_not, named, repeat(None)), bool, len(named))
            want = np.zeros(len(named), np.uint64)  # 0: unknown
            want[known] = np.array(identities_at(list(compress(named, known))), np.uint64)
            return want, named

        return expected

    def _current_table(self, request_id: str):
        return self.snapshot().block_tables().get(request_id)


class _LiveAfter(Collection[str]):
    """The live requests less those this step finished, plus the finished turns whose
    session the engine keeps for a later turn (`held`: their tables are the session's): a
    view, so that the pool check's `in` costs O(1) and no step copies every live (or
    waiting) request's id."""

    __slots__ = ("gone", "held", "live")

    def __init__(
        self, live: Mapping[str, object], gone: set[str], held: frozenset[str] = frozenset()
    ) -> None:
        self.live, self.gone, self.held = live, gone, held

    def __contains__(self, request_id: object) -> bool:
        if request_id in self.held:
            return True
        return request_id in self.live and request_id not in self.gone

    def holds_all(self, request_ids: list[str]) -> bool:
        """`all(rid in self for rid in request_ids)`, in C (the pool check's owners look
        at every table each step)."""
        if self.held:
            return all(map(self.__contains__, request_ids))
        return all(map(self.live.__contains__, request_ids)) and self.gone.isdisjoint(request_ids)

    def __iter__(self) -> Iterator[str]:
        yield from self.held
        yield from (rid for rid in self.live if rid not in self.gone and rid not in self.held)

    def __len__(self) -> int:
        return sum(1 for _ in self)
