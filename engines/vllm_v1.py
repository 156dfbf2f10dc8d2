"""Engine under test: vLLM 0.33's real v1 Scheduler + KVCacheManager, driven with no model.

The adapter owns no scheduling logic. Each step:

    schedule():            vLLM Scheduler.schedule()  -> vLLM SchedulerOutput
                           mapped here, as the v1 model runner (`_update_states`) reads it:
                             scheduled_new_reqs      -> block table set from block_ids[0]
                             scheduled_cached_reqs   -> resumed: table replaced by
                                                        new_block_ids[0]; running: appended
                             num_scheduled_tokens    -> batch order and chunk sizes
                             num_computed_tokens     -> the chunk's first position
                             finished_req_ids        -> runner forgets the request
                           an empty step is updated at once with vLLM's empty runner
                           output, as EngineCore.step() does
    update_from_output():  our sampled tokens -> a ModelRunnerOutput (one token for each
                           request whose chunk reaches num_tokens, none for a partial
                           prefill chunk) -> Scheduler.update_from_output()
    abort_request():       Scheduler.finish_requests(id, RequestStatus.FINISHED_ABORTED)
    kv_snapshot():         vLLM's own BlockPool / manager state (see vllm/v1_snapshot.py,
                           which also says how the null block, block 0, is reported)

Token layout of one request in one step (vLLM's `num_computed_tokens` is read from the
scheduler output, i.e. before `_update_after_schedule` advances it)::

    | computed (KV in cache)        | chunk: num_scheduled_tokens | rest |
    0                num_computed_tokens                  +num_scheduled   num_tokens

An exception raised inside vLLM propagates unchanged out of the method that called it;
the simulator turns it into an `engine-crash` finding.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from schedcheck.engines.protocol import (
    PLACEHOLDER_TOKEN_ID,
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    KVSnapshot,
    ScheduledRequest,
    SchedulerOutput,
    TokenArray,
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
from schedcheck.engines.vllm.v1_build import build_scheduler
from schedcheck.engines.vllm.v1_changes import BlockChangeLog
from schedcheck.engines.vllm.v1_frontend import queue_rejection
from schedcheck.engines.vllm.v1_paths import SameStepPreemptions
from schedcheck.engines.vllm.v1_snapshot import V1KVSnapshot

from vllm.sampling_params import SamplingParams  # isort: skip
from vllm.v1.core.sched.output import SchedulerOutput as VllmSchedulerOutput  # isort: skip
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput  # isort: skip
from vllm.v1.request import Request, RequestStatus  # isort: skip

ENGINE_NAME = "vllm-v1"
# vLLM stamps Request.arrival_time with time.time() as each request reaches the engine, so
# two requests never tie; the simulator adds a tick's arrivals at one simulated time. The
# adapter keeps vLLM's order by making each stamp at least this much later than the last
# (ties would decide the priority policy's victim and queue order by request id instead:
# a false liveness finding of the first priority campaign, tests/vllm/test_vllm_v1_options.py)
ARRIVAL_TIME_TICK_S = 1e-6


class VllmV1Engine:
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
        self._block_hasher = built.block_hasher
        self._evictions = CallCounter(  # True: a cached block lost its hash for reuse
            self.scheduler.kv_cache_manager.block_pool, "_maybe_evict_cached_block"
        )
        # the blocks vLLM's pool changed, for the incremental pool check
        self._changes = BlockChangeLog(self.scheduler.kv_cache_manager.block_pool)
        self._tokens: dict[str, TokenBuffer] = {}  # request id -> prompt + outputs
        self._live: dict[str, Request] = {}  # ids added and not yet reported finished
        self._tables = RunnerBlockTables()
        self._step = 0
        # steps scheduled and not yet updated, oldest first, as EngineCore's batch queue
        # (depth 1: synchronous; 2: async scheduling, step_with_batch_queue)
        self._in_flight: deque[tuple[SchedulerOutput, VllmSchedulerOutput]] = deque()
        self._depth = 2 if is_async_scheduling(config) else 1
        self._same_step_preemptions = SameStepPreemptions(self.scheduler)
        self._num_queue_rejections = 0
        self._last_arrival_time_s = -ARRIVAL_TIME_TICK_S
        self._pending_finished: list[FinishedRequest] = []  # aborts, rejections
        self._rejected: list[tuple[str, str]] = []  # (id, reason) for the next step

    # ------------------------------------------------------------------ requests --
    def add_request(self, request: EngineRequest) -> None:
        rid = request.request_id
        assert rid not in self._live, f"duplicate id {rid}"
        reason = frontend_rejection(request, self.config.max_model_len)
        if reason is None:
            reason = queue_rejection(self.scheduler.scheduler_config, self._queued())
            self._num_queue_rejections += reason is not None
        if reason is not None:
            self._rejected.append((rid, reason))
            return
        prompt = read_only_prompt(request.prompt_token_ids)
        vllm_request = Request(
            request_id=rid,
            prompt_token_ids=prompt.tolist(),
            sampling_params=SamplingParams(max_tokens=request.max_tokens, ignore_eos=True),
            pooling_params=None,
            arrival_time=self._arrival_time(request.arrival_time_s),
            priority=request.priority,
            cache_salt=request.cache_salt,
            block_hasher=self._block_hasher,
        )
        self.scheduler.add_request(vllm_request)
        self._tokens[rid] = TokenBuffer(prompt, request.max_tokens)
        self._live[rid] = vllm_request

    def _arrival_time(self, arrival_time_s: float) -> float:
        """A stamp after every earlier one, as time.time() gives vLLM's frontend."""
        stamp = max(arrival_time_s, self._last_arrival_time_s + ARRIVAL_TIME_TICK_S)
        self._last_arrival_time_s = stamp
        return stamp

    def abort_request(self, request_id: str) -> None:
        """vLLM's own abort path; the abort is reported by the next update_from_output."""
        request = self._live.get(request_id)
        if request is None or request.is_finished():
            return
        aborted = self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)
        assert [r.request_id for r in aborted] == [request_id]
        self._report_finished(request, "abort")

    # ---------------------------------------------------------------------- step --
    def schedule(self) -> SchedulerOutput:
        in_flight = self._in_flight
        assert sum(1 for o, _ in in_flight if o.scheduled) < self._depth, (
            "schedule() with the batch queue full: update_from_output() first"
        )
        self._same_step_preemptions.new_step()
        vllm_output = self.scheduler.schedule()
        output = self._map_output(vllm_output)
        in_flight.append((output, vllm_output))
        # EngineCore updates after an empty step too (the loop does not call): at once
        # when synchronous, else once it is the oldest of a full batch queue
        while len(in_flight) >= self._depth and not in_flight[0][0].scheduled:
            self._apply(in_flight.popleft()[1], EMPTY_MODEL_RUNNER_OUTPUT)
        return output

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> list[FinishedRequest]:
        in_flight = self._in_flight
        while in_flight and not in_flight[0][0].scheduled:  # empty steps queued before it
            self._apply(in_flight.popleft()[1], EMPTY_MODEL_RUNNER_OUTPUT)
        assert in_flight and in_flight[0][0] is output, "not the oldest step in flight"
        vllm_output = in_flight.popleft()[1]
        self._apply(vllm_output, self._runner_output(output, sampled_token_ids))
        for rid, token in sampled_token_ids.items():
            self._append_token(rid, int(token))
        finished, self._pending_finished = self._pending_finished, []
        return finished

    def _apply(self, vllm_output: VllmSchedulerOutput, runner_output: ModelRunnerOutput) -> None:
        """vLLM's update_from_output; the requests it finishes are reported next update."""
        engine_outputs = self.scheduler.update_from_output(vllm_output, runner_output)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                if out.finish_reason is not None:
                    self._report_finished(self._live[out.request_id], str(out.finish_reason))

    # ----------------------------------------------------------------- inspection --
    def kv_snapshot(self) -> KVSnapshot:
        return V1KVSnapshot(
            self.scheduler, self.config.block_size, self._evictions.num_calls, self._changes
        )

    def has_unfinished_requests(self) -> bool:
        # _pending_finished is not counted: those requests are finished already
        return self.scheduler.has_unfinished_requests() or bool(self._rejected)

    def rare_path_counts(self) -> Mapping[str, int]:
        """Rare paths only the adapter sees (sim/coverage.py adds them to its counts)."""
        return {
            "preempt-scheduled-same-step": self._same_step_preemptions.count,
            "queue-full-rejection": self._num_queue_rejections,
        }

    def _queued(self) -> tuple[int, int]:
        """(unfinished requests, prompt tokens of those with no output yet) as vLLM's API
        server counts them for admission (its output processor)."""
        in_prefill = (r.num_prompt_tokens for r in self._live.values() if not r.output_token_ids)
        return len(self._live), sum(in_prefill)

    def waiting_reasons(self) -> Mapping[str, str]:
        """Every live request not in vLLM's running queue, with its status and the pool."""
        free = self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
        running = {id(r) for r in self.scheduler.running}
        return {
            rid: f"{r.status.name}: {len(self.scheduler.running)} running, {free} free blocks"
            for rid, r in self._live.items()
            if id(r) not in running and not r.is_finished()
        }

    # ------------------------------------------------------------------- mapping --
    def _map_output(self, so: VllmSchedulerOutput) -> SchedulerOutput:
        """Our SchedulerOutput from vLLM's, in vLLM's batch order (num_scheduled_tokens)."""
        self._step += 1
        self._tables.drop(so.finished_req_ids)
        computed, admitted = self._update_tables(so)
        scheduled = tuple(
            self._scheduled_request(rid, n, computed[rid], rid in admitted)
            for rid, n in so.num_scheduled_tokens.items()
        )
        rejected, self._rejected = self._rejected, []
        for rid, reason in rejected:
            self._pending_finished.append(FinishedRequest(rid, (), f"rejected: {reason}"))
        return SchedulerOutput(
            step=self._step,
            scheduled=scheduled,
            preempted_req_ids=tuple(sorted(so.preempted_req_ids or ())),
            finished_req_ids=tuple(sorted(so.finished_req_ids)),
            rejected_req_ids=tuple(rid for rid, _ in rejected),
            rejected_reasons=tuple(reason for _, reason in rejected),
            block_copies=tuple(
                (c.src_block_id, c.dst_block_id) for c in so.kv_cache_block_copies or ()
            ),
        )

    def _update_tables(self, so: VllmSchedulerOutput) -> tuple[dict[str, int], set[str]]:
        """Apply the step's block ids to the runner tables, as `_update_states` does.

        Returns request id -> num_computed_tokens before the step, and the ids (re)admitted
        this step (new or resumed), whose num_computed_tokens is their prefix-cache hit.
        """
        computed: dict[str, int] = {}
        for new in so.scheduled_new_reqs:
            self._tables.set(new.req_id, new.block_ids[0])
            computed[new.req_id] = new.num_computed_tokens
        admitted = set(computed)
        cached = so.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            block_ids = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids:
                assert block_ids is not None, f"resumed {rid} without a block table"
                self._tables.set(rid, block_ids[0])
                admitted.add(rid)
            elif block_ids is not None:
                self._tables.extend(rid, block_ids[0])
            computed[rid] = cached.num_computed_tokens[i]
        return computed, admitted

    def _scheduled_request(
        self, rid: str, num_scheduled: int, num_computed: int, admitted: bool
    ) -> ScheduledRequest:
        request, tokens = self._live[rid], self._tokens[rid]
        end = num_computed + num_scheduled
        # schedule() has already advanced the request by this step's tokens
        assert request.num_computed_tokens == end, rid
        if self._depth > 1 and end > tokens.num_tokens:  # async: runs in-flight samples
            num_tokens, chunk = end, _chunk_with_placeholders(tokens, num_computed, end)
        else:
            num_tokens, chunk = tokens.num_tokens, tokens.chunk(num_computed, end)
        return ScheduledRequest(  # positional, in field order: this runs per request per step
            rid,
            num_computed,
            num_scheduled,
            num_tokens,  # == request.num_tokens (+ placeholders): the tokens the runner knows
            request.num_prompt_tokens,
            chunk,
            self._tables.table(rid),
            num_computed if admitted else 0,
        )

    def _runner_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> ModelRunnerOutput:
        """One token for each sampling request, none for a partial prefill chunk."""
        req_ids = [r.request_id for r in output.scheduled]
        sampled: list[list[int]] = []
        for r in output.scheduled:
            token = sampled_token_ids.get(r.request_id)
            assert (token is not None) <= r.samples, f"{r.request_id}: token but no sampling"
            assert token is not None or not r.samples or r.request_id not in self._live, (
                f"{r.request_id}: its chunk reaches num_tokens but no token was sampled"
            )
            sampled.append([] if token is None else [int(token)])
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )

    def _append_token(self, rid: str, token_id: int) -> None:
        """Mirror the token vLLM appended (none if the request was aborted mid-step)."""
        request = self._live.get(rid)
        if request is None:
            return
        buf = self._tokens[rid]
        if request.num_tokens == buf.num_tokens + 1:
            buf.append(token_id)
        assert request.num_tokens == buf.num_tokens, f"{rid}: token counts diverged"

    def _report_finished(self, request: Request, reason: str) -> None:
        rid = request.request_id
        self._live.pop(rid)
        self._tokens.pop(rid)
        self._pending_finished.append(
            FinishedRequest(rid, tuple(int(t) for t in request.output_token_ids), reason)
        )


def _chunk_with_placeholders(tokens: TokenBuffer, start: int, stop: int) -> TokenArray:
    """Tokens [start, stop) where stop passes the known tokens: the positions the engine
    has no token for yet (async scheduling: the previous step's sample, still in flight)
    hold PLACEHOLDER_TOKEN_ID, which the runner fills in::

        known tokens:  | ............ num_tokens |
        chunk:                    | start ...... | placeholders | stop
    """
    known = tokens.num_tokens
    assert stop > known
    placeholders = np.full(stop - max(start, known), PLACEHOLDER_TOKEN_ID, dtype=np.int64)
    if start >= known:
        return placeholders
    return np.concatenate([tokens.chunk(start, known), placeholders])


def make_engine(config: EngineConfig) -> VllmV1Engine:
    """Factory named in the engine registry ("vllm-v1")."""
    return VllmV1Engine(config)
