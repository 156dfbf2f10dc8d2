"""Engine under test: vLLM v1's real Scheduler + KVCacheManager, driven with no model.

One mapping for vLLM 0.10.1.1 to 0.34.0 (a newer one is tried, an older refused: factory.py);
where releases differ, a shim of eras.py picks the branch by a feature test (docs/bisect.md).

The adapter owns no scheduling logic. Each step:

    schedule():            vLLM Scheduler.schedule()  -> vLLM SchedulerOutput
                           mapped here, as the v1 model runner (`_update_states`) reads it:
                             scheduled_new_reqs      -> block table set from block_ids[0]
                             scheduled_cached_reqs   -> resumed: table replaced by
                                                        new_block_ids[0]; running: appended
                             num_scheduled_tokens    -> batch order and chunk sizes
                             num_computed_tokens     -> the chunk's first position
                             scheduled_spec_decode_tokens -> the chunk's last tokens
                             block_ids[g]            -> the table of KV-cache group g
                             finished_req_ids        -> runner forgets the request
                           an empty step is updated at once with vLLM's empty runner
                           output, as EngineCore.step() does
    update_from_output():  our sampled tokens -> a ModelRunnerOutput (one token for each
                           request whose chunk reaches num_tokens, none for a partial
                           prefill chunk; with drafts: the accepted drafts + the bonus
                           token, as the rejection sampler returns them; vLLM rolls
                           num_computed_tokens back by the rejected ones)
                           -> Scheduler.update_from_output()
    update_draft_token_ids(): the drafter's proposals -> DraftTokenIds ->
                           Scheduler.update_draft_token_ids(), as EngineCore.post_step
                           (synchronous). Async: never called; the AsyncScheduler schedules
                           -1 placeholders, which the runner (the loop) fills in, moving the
                           chunk back by the drafts the step in flight rejected
    abort_request():       Scheduler.finish_requests(id, RequestStatus.FINISHED_ABORTED)
    kv_snapshot():         vLLM's own BlockPool / manager state (see snapshot.py,
                           which also says how the null block, block 0, is reported)

Token layout of one request in one step (vLLM's `num_computed_tokens` is read from the
scheduler output, i.e. before `_update_after_schedule` advances it)::

    | computed (KV in cache)        | chunk: num_scheduled_tokens | rest |
    0                num_computed_tokens                  +num_scheduled   num_tokens

An exception raised inside vLLM propagates unchanged (an `engine-crash` finding); where
vLLM's output contradicts its own contract, the adapter raises EngineFault with the values.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

import numpy as np

from schedcheck.engines.engine_fault import EngineFault
from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    KVSnapshot,
    SchedulerOutput,
    is_async_scheduling,
)
from schedcheck.engines.vllm.common import (
    CallCounter,
    RunnerBlockTables,
    TokenBuffer,
    frontend_rejection,
    read_only_prompt,
    refuse_lookahead,
)
from schedcheck.engines.vllm.v1 import eras, paths
from schedcheck.engines.vllm.v1.build import build_scheduler
from schedcheck.engines.vllm.v1.changes import BlockChangeLog
from schedcheck.engines.vllm.v1.faults import FaultPoints
from schedcheck.engines.vllm.v1.frontend import queue_rejection
from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex
from schedcheck.engines.vllm.v1.mapping import OutputMapping
from schedcheck.engines.vllm.v1.requests import RequestBuilder
from schedcheck.engines.vllm.v1.runner import sampled_lists
from schedcheck.engines.vllm.v1.sessions import Sessions, streaming_input
from schedcheck.engines.vllm.v1.snapshot import V1KVSnapshot

from vllm.v1.core.sched.output import SchedulerOutput as VllmSchedulerOutput  # isort: skip
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # isort: skip
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput  # isort: skip
from vllm.v1.request import Request, RequestStatus  # isort: skip

ENGINE_NAME = "vllm-v1"


class VllmV1Engine(OutputMapping):
    """The Engine protocol over one vLLM v1 Scheduler."""

    name = ENGINE_NAME
    supports_async_scheduling = True  # the loop may schedule step N+1 before updating N

    def __init__(self, config: EngineConfig) -> None:
        assert config.block_manager in ("hashed", "v1"), (
            f"vllm-v1 has one KV-cache manager; block_manager={config.block_manager!r}"
        )
        refuse_lookahead(config)
        built = build_scheduler(config)
        self.config = config
        self.scheduler = built.scheduler
        self._evictions = CallCounter(  # True: a cached block lost its hash for reuse
            self.scheduler.kv_cache_manager.block_pool, "_maybe_evict_cached_block"
        )
        self._window_frees = [  # calls that freed blocks before a sliding window
            paths.count_window_frees(m)
            for m in self.scheduler.kv_cache_manager.coordinator.single_type_managers
            if isinstance(m, SlidingWindowManager)
        ]
        # the blocks vLLM's pool changed, for the incremental pool check
        self._changes = BlockChangeLog(self.scheduler.kv_cache_manager.block_pool)
        # what each block hash means, for the pool check; its block_hasher (vLLM's, noting
        # each request it hashed for) is the one every Request gets
        self._hash_index = BlockHashIndex(built.block_hasher)
        self._tokens: dict[str, TokenBuffer] = {}  # request id -> prompt + outputs
        self._live: dict[str, Request] = {}  # ids added and not yet reported finished
        self._continues: dict[str, Callable[[], bool] | None] = {}  # EngineRequest.continues
        self._num_groups = len(config.kv_cache_groups)
        self._group_tables = [RunnerBlockTables() for _ in range(self._num_groups)]
        self._tables = self._group_tables[0]
        self._step = 0
        # steps scheduled and not yet updated, oldest first, as EngineCore's batch queue
        # (depth 1: synchronous; 2: async scheduling, step_with_batch_queue)
        self._in_flight: deque[tuple[SchedulerOutput, VllmSchedulerOutput]] = deque()
        self._depth = 2 if is_async_scheduling(config) else 1
        self._same_step_preemptions = paths.SameStepPreemptions(self.scheduler)
        # resumable streaming-input sessions (sessions.py): vLLM's ids -> our turns' ids
        self._sessions = Sessions(streaming_input(config))
        self._faults = FaultPoints(self.scheduler, self._sessions.turn_id)  # sim/faults.py's
        self._cache_aware_reorders = paths.count_cache_aware_reorders(self.scheduler)
        self._num_queue_rejections = 0
        # vLLM's Requests as its frontend builds them (the block hasher vLLM gives each)
        self._requests = RequestBuilder(self._hash_index.block_hasher, self._sessions.enabled)
        self._pending_finished: list[FinishedRequest] = []  # aborts, rejections
        self._rejected: list[tuple[str, str]] = []  # (id, reason) for the next step
        self._last_batch: list[str] = []  # the ids of the step last applied

    # ------------------------------------------------------------------ requests --
    def add_request(self, request: EngineRequest) -> None:
        rid = request.request_id
        assert rid not in self._live, f"duplicate id {rid}"
        session = self._sessions.continued(request)  # vLLM runs its queued chunk already
        if session is not None:
            self._track(request, session)
            return
        num_sent = self._sessions.num_chunk_tokens(request)  # a session's chunk: alone
        reason = frontend_rejection(num_sent, self.config.max_model_len)
        if reason is None:
            reason = queue_rejection(self.scheduler.scheduler_config, self._live.values())
            self._num_queue_rejections += reason is not None
        if reason is not None:
            self._rejected.append((rid, reason))
            self._close(self._sessions.take(request))  # its parent's session: not continued
            return
        session, chunk = self._resume(request) or (None, request.prompt_token_ids.tolist())
        session_id = None if session is None else session.request_id
        vllm_request = self._requests.build(request, chunk, session_id)
        if session is not None:  # its hashes past the kept tokens are computed again
            self._hash_index.renew(session.request_id)
        self.scheduler.add_request(vllm_request)  # a session's next chunk: it continues
        self._track(request, vllm_request if session is None else session)

    def _track(self, request: EngineRequest, vllm_request: Request) -> None:
        """`request` is live, run by `vllm_request` (a session's, for a later turn)."""
        rid = request.request_id
        self._tokens[rid] = TokenBuffer(
            read_only_prompt(request.prompt_token_ids), request.max_tokens
        )
        self._live[rid] = vllm_request
        self._continues[rid] = request.continues

    @property
    def streams_chunks(self) -> bool:
        """A later turn's input is sent while its parent runs (sessions.py's "queued")."""
        return self._sessions.queues_chunks

    def stream_chunk(self, chunk: EngineRequest) -> bool:
        """A later turn's own input, sent while its parent runs as AsyncLLM sends a
        streaming input: queued in the parent's session (True), or refused where the parent
        no longer runs, its cache_salt differs or vLLM's frontend refuses the chunk alone."""
        parent = self._live.get(chunk.parent_request_id or "")
        if parent is None or parent.is_finished() or chunk.cache_salt != parent.cache_salt:
            return False
        if frontend_rejection(chunk.num_prompt_tokens, self.config.max_model_len) is not None:
            return False
        queued = self._requests.build(chunk, chunk.prompt_token_ids.tolist(), parent.request_id)
        self.scheduler.add_request(queued)  # vLLM keeps it in the session's streaming_queue
        self._sessions.queue(chunk.parent_request_id or "", chunk.request_id)
        return True

    def _resume(self, request: EngineRequest) -> tuple[Request, list[int]] | None:
        """The kept session `request` continues and the chunk it sends (sessions.py), or
        None; its parent's session, where it cannot continue it, is closed."""
        session = self._sessions.take(request)
        chunk = None if session is None else self._sessions.resume(request, session)
        if chunk is None:
            self._close(session)
            return None
        return session, chunk

    def abort_request(self, request_id: str) -> None:
        """vLLM's own abort path; the abort is reported by the next update_from_output."""
        request = self._live.get(request_id)
        if request is None or request.is_finished():
            return
        vllm_id = request.request_id  # a session's, for a later turn
        aborted = self.scheduler.finish_requests(vllm_id, RequestStatus.FINISHED_ABORTED)
        finished = eras.finished_ids(aborted, vllm_id)
        if finished != [vllm_id]:
            message = f"finish_requests({vllm_id!r}) reported {finished} finished"
            raise _fault(message, "an abort reported other requests", request_id)
        self._report_finished(request_id, "abort")

    # ---------------------------------------------------------------------- step --
    def schedule(self) -> SchedulerOutput:
        self._faults.settle(self._apply_empty_heads, self._in_flight)
        in_flight = self._in_flight
        assert sum(1 for o, _ in in_flight if o.scheduled) < self._depth, (
            "schedule() with the batch queue full: update_from_output() first"
        )
        self._same_step_preemptions.new_step()
        running = [r for r in self.scheduler.running]  # preempted ids, where vLLM omits them
        vllm_output = self.scheduler.schedule()
        by_fault, dropped = self._faults.take_preempted()  # before the call (faults.py)
        preempted = eras.preempted_req_ids(vllm_output, running) - by_fault
        self._same_step_preemptions.end_step(preempted)
        output = self._map_output(vllm_output, preempted, by_fault, dropped)
        in_flight.append((output, vllm_output))
        # EngineCore updates after an empty step too (the loop does not call): at once
        # when synchronous, else once it is the oldest of a full batch queue
        while len(in_flight) >= self._depth and not in_flight[0][0].scheduled:
            self._apply(in_flight.popleft()[1], EMPTY_MODEL_RUNNER_OUTPUT)
        return output

    def update_from_output(
        self,
        output: SchedulerOutput,
        sampled_token_ids: Mapping[str, int],
        accepted_token_ids: Mapping[str, tuple[int, ...]] | None = None,
    ) -> list[FinishedRequest]:
        in_flight = self._in_flight
        self._apply_empty_heads()  # empty steps queued before it
        assert in_flight and in_flight[0][0] is output, "not the oldest step in flight"
        vllm_output = in_flight.popleft()[1]
        self._last_batch = [r.request_id for r in output.scheduled]
        accepted = accepted_token_ids or {}
        sampled = sampled_lists(output, sampled_token_ids, accepted, self._live)
        req_ids = list(vllm_output.num_scheduled_tokens)  # vLLM's names, our output's order
        self._apply(vllm_output, eras.runner_output(ModelRunnerOutput, req_ids, sampled))
        for rid, token in sampled_token_ids.items():
            self._append_tokens(rid, (*accepted.get(rid, ()), int(token)))
        finished, self._pending_finished = self._pending_finished, []
        return finished

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        """The drafter's proposals, as EngineCore.post_step hands the runner's to vLLM."""
        # the runner returns an entry for every request of its batch, [] where it proposes
        # nothing: 0.11.0's scheduler keeps a request's drafts until they are replaced
        # (0.11.1 on clears them once scheduled, so the [] change nothing there)
        batch = [rid for rid in self._last_batch if rid in self._live]
        req_ids = [*draft_token_ids, *(rid for rid in batch if rid not in draft_token_ids)]
        drafts = [list(draft_token_ids.get(rid, ())) for rid in req_ids]
        vllm_ids = list(map(self._sessions.session_id, req_ids))
        self.scheduler.update_draft_token_ids(eras.draft_token_ids(vllm_ids, drafts))

    def _apply_empty_heads(self) -> None:
        """The empty steps at the head of the batch queue, applied (EngineCore pops them)."""
        while self._in_flight and not self._in_flight[0][0].scheduled:
            self._apply(self._in_flight.popleft()[1], EMPTY_MODEL_RUNNER_OUTPUT)

    def _apply(self, vllm_output: VllmSchedulerOutput, runner_output: ModelRunnerOutput) -> None:
        """vLLM's update_from_output; the requests it finishes are reported next update."""
        queued = self._sessions.queued  # their outputs, before vLLM continues them
        before = {t: tuple(self._live[t].output_token_ids) for t in queued if t in self._live}
        engine_outputs = self.scheduler.update_from_output(vllm_output, runner_output)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                if out.finish_reason is not None:
                    turn = self._sessions.turn_id(out.request_id)
                    last = (*before.get(turn, ()), *out.new_token_ids)
                    self._report_finished(turn, str(out.finish_reason), last)

    def inject_fault(self, kind: str, rng: np.random.Generator) -> str | None:
        """Fault points of sim/faults.py through vLLM's own calls (faults.py)."""
        return self._faults.inject(kind, [o for o, _ in self._in_flight], rng)

    # ----------------------------------------------------------------- inspection --
    def kv_snapshot(self) -> KVSnapshot:
        window_frees = sum(c[0] for c in self._window_frees)
        return V1KVSnapshot(self.scheduler, self.config.block_size, self._evictions.num_calls,
                            window_frees, self._changes, self._hash_index,
                            self._sessions)  # fmt: skip

    def has_unfinished_requests(self) -> bool:
        # _pending_finished is not counted: those requests are finished already
        self._faults.settle(self._apply_empty_heads, self._in_flight)
        unfinished = self.scheduler.has_unfinished_requests() or bool(self._rejected)
        return unfinished or self._faults.steps_while_paused()

    def rare_path_counts(self) -> Mapping[str, int]:
        """Rare paths only the adapter sees (sim/coverage.py adds them); none it lacks."""
        counts = {"preempt-scheduled-same-step": self._same_step_preemptions.count,
                  "queue-full-rejection": self._num_queue_rejections}  # fmt: skip
        if self._cache_aware_reorders is not None:
            counts["cache-aware-reorder"] = self._cache_aware_reorders[0]
        counts.update(self._faults.path_counts)  # the fault points' (faults.py)
        if self._sessions.enabled:
            counts["session-resumed"] = self._sessions.num_resumed
        if self._sessions.queues_chunks:
            counts["session-chunk-queued"] = self._sessions.num_queued
        return counts

    def waiting_reasons(self) -> Mapping[str, str]:
        """Every live request not in vLLM's running queue, with its status and the pool."""
        free = self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
        running = {id(r) for r in self.scheduler.running}
        paused = f", paused ({self._faults.pause_mode})" if self._faults.pause_mode else ""
        return {
            rid: f"{r.status.name}: {len(running)} running, {free} free blocks{paused}"
            for rid, r in self._live.items()
            if id(r) not in running and not r.is_finished()
        }

    def _append_tokens(self, rid: str, token_ids: tuple[int, ...]) -> None:
        """Mirror the tokens vLLM appended: the first ones up to its stop (max_tokens), none
        if the request was aborted mid-step."""
        request = self._live.get(rid)
        if request is None:
            return
        buf = self._tokens[rid]
        num_appended = request.num_tokens - buf.num_tokens
        if not 0 <= num_appended <= len(token_ids):
            message = f"{rid}: vLLM appended {num_appended} tokens for {len(token_ids)} sampled"
            raise _fault(message, "appended tokens differ from the sampled ones", rid)
        for token_id in token_ids[:num_appended]:
            buf.append(token_id)

    def _report_finished(self, rid: str, reason: str, queued_outputs: tuple = ()) -> None:
        """Turn `rid` finished; a session whose turn stopped is kept for the later turn that
        waits for it, or else closed (sessions.py). `queued_outputs`: the turn's outputs
        where vLLM continued its session with a queued chunk (which clears them)."""
        request = self._live.pop(rid)
        self._tokens.pop(rid)
        continues = self._continues.pop(rid, None)
        if self._sessions.stopped(rid, request):  # vLLM continued it with a queued chunk
            outputs = tuple(map(int, queued_outputs))
            self._hash_index.renew(request.request_id)  # its hashes cut back and grown
        else:
            outputs = tuple(int(t) for t in request.output_token_ids)
            if not request.is_finished() and not self._sessions.keep(rid, request, continues):
                self._close(request)
        self._pending_finished.append(FinishedRequest(rid, outputs, reason))

    def _close(self, session: Request | None) -> None:
        """End a kept session's input stream (a request that is not resumable, as AsyncLLM
        sends it): vLLM aborts the session and frees its blocks."""
        if session is None:
            return
        self.scheduler.add_request(self._requests.end_of_stream(session.request_id))


def _fault(message: str, case: str, request_id: str) -> EngineFault:
    """vLLM broke its own contract (sim/blame.py: an engine-crash with this case)."""
    return EngineFault("engine-crash", message, case=case, request_id=request_id)


def make_engine(config: EngineConfig) -> VllmV1Engine:
    """Factory named in the engine registry ("vllm-v1")."""
    return VllmV1Engine(config)
