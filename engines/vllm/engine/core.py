"""Engine under test: vLLM's whole engine (EngineCore + its CPU model runner), in-process.

`--engine vllm-engine`. Where `vllm-v1` drives vLLM's Scheduler alone, this drives vLLM's
`EngineCore`: its scheduler *and* its model executor, worker and `CPUModelRunner` (the
persistent `InputBatch`, `BlockTable` slot mapping, `_prepare_inputs`, the attention
metadata builder), on a tiny dummy-weight Llama (`model.py`). One simulated step is one
engine step, split where EngineCore.step() itself splits it::

    schedule():            Scheduler.schedule()  -> vLLM SchedulerOutput
                           model_executor.execute_model(it): the runner updates its batch,
                           prepares the inputs, builds the attention metadata and runs the
                           forward; the shadow backend (shadow_backend.py) records the
                           metadata its first layer ran with
                           -> our SchedulerOutput, in the runner's batch order, and
                              runner_metadata(step): vLLM's metadata as a RunnerMetadata
    update_from_output():  model_executor.sample_tokens(): vLLM's sampler, its sampled ids
                           replaced by the harness's tokens (the hash model's), so the
                           runner's own bookkeeping writes them into its persistent batch
                           -> Scheduler.update_from_output()
    abort_request():       Scheduler.finish_requests(id, FINISHED_ABORTED) (EngineCore's
                           abort_requests)
    kv_snapshot():         vLLM's own BlockPool / manager (the vllm-v1 adapter's snapshot,
                           with its eviction count, change log and block-hash index)

The SchedulerOutput is mapped from vLLM's scheduler output as the runner's `_update_states`
reads it (block tables set from block_ids[0] for new and resumed requests, appended with
new_block_ids[0]), independently of the runner: the shadow KV then checks the runner's
metadata against what the scheduler decided, so a runner bug is a finding.

vLLM's scheduler options (policy, `vllm:` SchedulerConfig fields) reach its config through
EngineArgs (build.py); the queue limits are checked here, before a request reaches the
engine core, as vLLM's API server does (engines/vllm/v1/frontend.py: a 503 is a
rejection). Not modelled (refused by the factory, see factory.py): speculative decoding,
async scheduling, several KV-cache groups. An exception inside vLLM propagates unchanged:
the simulator records an `engine-crash`.
"""

from __future__ import annotations

import gc
import shutil
from collections.abc import Mapping
from typing import Any

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    KVSnapshot,
    ScheduledRequest,
    SchedulerOutput,
)
from schedcheck.engines.vllm.common import (
    CallCounter,
    RunnerBlockTables,
    TokenBuffer,
    frontend_rejection,
    read_only_prompt,
)
from schedcheck.engines.vllm.engine import model, shadow_backend
from schedcheck.engines.vllm.engine.build import (
    ForcedSampler,
    KernelSample,
    build_engine_core,
    runner_metadata_of,
    shutdown_engine_core,
    snapshot_class,
)
from schedcheck.engines.vllm.engine.model import DEFAULT_VOCAB_SIZE
from schedcheck.engines.vllm.v1 import paths
from schedcheck.engines.vllm.v1.changes import BlockChangeLog
from schedcheck.engines.vllm.v1.frontend import queue_rejection
from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex

ENGINE_NAME = "vllm-engine"
_LIVE: list[VllmWholeEngine] = []  # the engine built last in this process (see __init__)
ARRIVAL_TIME_TICK_S = 1e-6  # as the vllm-v1 adapter: arrival stamps never tie


class VllmWholeEngine:
    """The Engine protocol over one in-process vLLM EngineCore (scheduler + CPU runner)."""

    name = ENGINE_NAME
    supports_async_scheduling = False

    def __init__(
        self, config: EngineConfig, vocab_size: int = DEFAULT_VOCAB_SIZE, kernels: bool = False
    ) -> None:
        """`kernels`: vLLM's own CPU attention kernels (CPU_ATTN) instead of the shadow
        backend; the runner hands no metadata then, and the sampler keeps every forced
        row's logprobs (`samples`, for gpu/vllm_engine.py's kernel replay)."""
        # one engine per process: vLLM's worker keeps its KV cache and model until shut down,
        # and the fuzzer builds engine after engine (7 GB resident after 70 s without this)
        while _LIVE:  # bounded: at most one
            _LIVE.pop().close()
        self.config = config
        self.kernels = kernels
        self._model_dir = model.write_model_dir(vocab_size, config.max_model_len)
        try:
            self.core = build_engine_core(config, str(self._model_dir), vocab_size, kernels)
        finally:
            shutil.rmtree(self._model_dir, ignore_errors=True)
        self.scheduler = self.core.scheduler
        self.runner = self.core.model_executor.driver_worker.worker.model_runner
        self.sampler = ForcedSampler(
            self.runner.sampler, lambda: self.runner.input_batch, record=kernels
        )
        self.runner.sampler = self.sampler
        self._logits_indices = _LogitsIndices(self.runner)
        self._snapshot_cls = snapshot_class()
        # what the vllm-v1 adapter hands its snapshot, so the pool checks run as deep here:
        # evictions (evict-cached-block), the blocks changed (the incremental check) and
        # what each block hash stands for (block-pool.hash-content's meaning check)
        pool = self.scheduler.kv_cache_manager.block_pool
        self._evictions = CallCounter(pool, "_maybe_evict_cached_block")
        self._changes = BlockChangeLog(pool)
        self._hash_index = BlockHashIndex(self.core.request_block_hasher)  # notes who it hashed
        self._tokens: dict[str, TokenBuffer] = {}
        self._live: dict[str, Any] = {}  # request id -> vLLM Request, until reported
        self._tables = RunnerBlockTables()
        self._step = 0
        self._in_flight: tuple[SchedulerOutput, Any] | None = None
        self._runner_meta: dict[int, RunnerMetadata] = {}
        self._pending_finished: list[FinishedRequest] = []
        self._rejected: list[tuple[str, str]] = []
        self._num_queue_rejections = 0
        self._same_step_preemptions = paths.SameStepPreemptions(self.scheduler)
        self._last_arrival_time_s = -ARRIVAL_TIME_TICK_S
        shadow_backend.RECORDER.take()  # anything a profiling run left
        _LIVE.append(self)

    def close(self) -> None:
        """Shut vLLM's engine core down (its worker, model and KV cache go)."""
        core, self.core = self.core, None
        self.runner = None  # the sampler it wraps goes with the core
        if core is not None:
            shutdown_engine_core(core)
        del core
        gc.collect()

    # ------------------------------------------------------------------ requests --
    def add_request(self, request: EngineRequest) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        rid = request.request_id
        assert rid not in self._live, f"duplicate id {rid}"
        assert request.eos_token_id is None, "EOS stops are not driven here (eos=False)"
        reason = frontend_rejection(request.num_prompt_tokens, self.config.max_model_len)
        if reason is None:  # the API server's queue limits (vllm:max_num_queued_*)
            reason = queue_rejection(self.scheduler.scheduler_config, self._live.values())
            self._num_queue_rejections += reason is not None
        if reason is not None:
            self._rejected.append((rid, reason))
            return
        prompt = read_only_prompt(request.prompt_token_ids)
        stamp = max(request.arrival_time_s, self._last_arrival_time_s + ARRIVAL_TIME_TICK_S)
        self._last_arrival_time_s = stamp
        vllm_request = Request(
            request_id=rid,
            prompt_token_ids=prompt.tolist(),
            sampling_params=SamplingParams(
                max_tokens=request.max_tokens, ignore_eos=True, temperature=0.0
            ),
            pooling_params=None,
            arrival_time=stamp,
            cache_salt=request.cache_salt,
            priority=request.priority,
            block_hasher=self._hash_index.block_hasher,
        )
        self.core.add_request(vllm_request)
        self._tokens[rid] = TokenBuffer(prompt, request.max_tokens)
        self._live[rid] = vllm_request

    def abort_request(self, request_id: str) -> None:
        from vllm.v1.request import RequestStatus

        request = self._live.get(request_id)
        if request is None or request.is_finished():
            return
        self.scheduler.finish_requests([request_id], RequestStatus.FINISHED_ABORTED)
        self._report_finished(request, "abort")

    # ---------------------------------------------------------------------- step --
    def schedule(self) -> SchedulerOutput:
        """One engine step up to the sampler: schedule, then the runner's forward."""
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT

        assert self._in_flight is None, "schedule() twice: update_from_output() first"
        self._same_step_preemptions.new_step()
        vllm_output = self.scheduler.schedule()
        self._same_step_preemptions.end_step(set(vllm_output.preempted_req_ids or ()))
        runner_output = self.core.model_executor.execute_model(vllm_output)
        output = self._map_output(vllm_output)
        if runner_output is not None:  # nothing ran (EngineCore.step's empty path)
            assert not output.scheduled, "the runner sampled without the harness"
            self._apply(vllm_output, runner_output or EMPTY_MODEL_RUNNER_OUTPUT)
            shadow_backend.RECORDER.take()
            return output
        if not self.kernels:
            self._runner_meta[output.step] = self._read_runner_metadata(output)
        self._in_flight = (output, vllm_output)
        return output

    @property
    def samples(self) -> Mapping[tuple[str, int], KernelSample]:
        """Kernel mode: vLLM's logprobs at every (request, position) sampled so far."""
        return self.sampler.samples if self.sampler is not None else {}

    def runner_metadata(self, step: int) -> RunnerMetadata | None:
        """vLLM's runner's metadata of `step` (the protocol's optional hand-over)."""
        return self._runner_meta.pop(step, None)

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> list[FinishedRequest]:
        assert self._in_flight is not None and self._in_flight[0] is output, "not in flight"
        vllm_output = self._in_flight[1]
        self._in_flight = None
        self._runner_meta.pop(output.step, None)
        self.sampler.forced = sampled_token_ids
        self.sampler.step = output.step
        self.sampler.positions = {
            r.request_id: r.num_computed_tokens + r.num_scheduled_tokens
            for r in output.scheduled
            if r.samples
        }
        try:
            runner_output = self.core.model_executor.sample_tokens(None)
        finally:
            self.sampler.forced = {}
        self._apply(vllm_output, runner_output)
        for rid, token in sampled_token_ids.items():
            self._append_token(rid, int(token))
        finished, self._pending_finished = self._pending_finished, []
        return finished

    def _apply(self, vllm_output: Any, runner_output: Any) -> None:
        engine_outputs = self.scheduler.update_from_output(vllm_output, runner_output)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                if out.finish_reason is not None and out.request_id in self._live:
                    self._report_finished(self._live[out.request_id], str(out.finish_reason))

    # ----------------------------------------------------------------- inspection --
    def kv_snapshot(self) -> KVSnapshot:
        snapshot: KVSnapshot = self._snapshot_cls(
            self.scheduler,
            self.config.block_size,
            self._evictions.num_calls,
            0,  # one full-attention group: no sliding window frees blocks
            self._changes,
            self._hash_index,
        )
        return snapshot

    def has_unfinished_requests(self) -> bool:
        return bool(self.scheduler.has_unfinished_requests()) or bool(self._rejected)

    def rare_path_counts(self) -> Mapping[str, int]:
        """Rare paths only the adapter sees (sim/coverage.py adds them), counted as the
        vllm-v1 adapter counts them (engines/vllm/v1/paths.py, frontend.py)."""
        return {"preempt-scheduled-same-step": self._same_step_preemptions.count,
                "queue-full-rejection": self._num_queue_rejections}  # fmt: skip

    def waiting_reasons(self) -> Mapping[str, str]:
        free = self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
        running = {id(r) for r in self.scheduler.running}
        return {
            rid: f"{r.status.name}: {len(self.scheduler.running)} running, {free} free blocks"
            for rid, r in self._live.items()
            if id(r) not in running and not r.is_finished()
        }

    # ------------------------------------------------------------------- mapping --
    def _map_output(self, so: Any) -> SchedulerOutput:
        """Our SchedulerOutput from vLLM's, in the runner's batch order."""
        self._step += 1
        self._tables.drop(so.finished_req_ids)
        computed, admitted = self._update_tables(so)
        batch = self._batch_order(so)
        scheduled = tuple(
            self._scheduled_request(
                rid, so.num_scheduled_tokens[rid], computed[rid], rid in admitted
            )
            for rid in batch
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
        )

    def _batch_order(self, so: Any) -> list[str]:
        """The scheduled ids in the order the runner ran them (its persistent batch)."""
        if not so.num_scheduled_tokens:
            return []
        num_reqs = len(so.num_scheduled_tokens)
        batch = [rid for rid in self.runner.input_batch.req_ids[:num_reqs] if rid is not None]
        assert sorted(batch) == sorted(so.num_scheduled_tokens), (
            f"the runner's batch {batch} is not the scheduled {list(so.num_scheduled_tokens)}"
        )
        return batch

    def _update_tables(self, so: Any) -> tuple[dict[str, int], set[str]]:
        """The runner-side tables as `_update_states` keeps them; returns request id ->
        num_computed_tokens before the step, and the ids (re)admitted this step."""
        computed: dict[str, int] = {}
        for new in so.scheduled_new_reqs:
            self._tables.set(new.req_id, new.block_ids[0])
            computed[new.req_id] = new.num_computed_tokens
        admitted = set(computed)
        cached = so.scheduled_cached_reqs
        resumed = set(cached.resumed_req_ids)
        for i, rid in enumerate(cached.req_ids):
            new_block_ids = cached.new_block_ids[i]
            if rid in resumed:
                assert new_block_ids is not None, f"resumed {rid} without a block table"
                self._tables.set(rid, new_block_ids[0])
                admitted.add(rid)
            elif new_block_ids is not None:
                self._tables.extend(rid, new_block_ids[0])
            computed[rid] = cached.num_computed_tokens[i]
        return computed, admitted

    def _scheduled_request(
        self, rid: str, num_scheduled: int, num_computed: int, admitted: bool
    ) -> ScheduledRequest:
        tokens = self._tokens[rid]
        end = num_computed + num_scheduled
        return ScheduledRequest(
            request_id=rid,
            num_computed_tokens=num_computed,
            num_scheduled_tokens=num_scheduled,
            num_tokens=tokens.num_tokens,
            num_prompt_tokens=self._live[rid].num_prompt_tokens,
            token_ids=tokens.chunk(num_computed, end),
            block_table=self._tables.table(rid),
            num_cached_tokens=num_computed if admitted else 0,
        )

    def _read_runner_metadata(self, output: SchedulerOutput) -> RunnerMetadata:
        """vLLM's metadata of this step (group 0's, as its first layer ran it)."""
        recorded = [m for m in shadow_backend.RECORDER.take() if m.group == 0]
        assert len(recorded) == 1, f"{len(recorded)} group-0 metadata recorded this step"
        return runner_metadata_of(recorded[0], output, self.runner, self._logits_indices.take())

    def _append_token(self, rid: str, token: int) -> None:
        request = self._live.get(rid)
        if request is None:
            return
        buf = self._tokens[rid]
        if request.num_tokens > buf.num_tokens:
            buf.append(token)

    def _report_finished(self, request: Any, reason: str) -> None:
        rid = request.request_id
        self._live.pop(rid)
        self._tokens.pop(rid)
        self._pending_finished.append(
            FinishedRequest(rid, tuple(int(t) for t in request.output_token_ids), reason)
        )


class _LogitsIndices:
    """The logits indices vLLM's runner computed this step (`_prepare_inputs` returns them
    to its caller, not to the attention backend): the runner's method wrapped on the
    instance, the class's own looked up at each call (a test may patch the class)."""

    def __init__(self, runner: Any) -> None:
        self.last: Any = None
        cls = type(runner)

        def prepare_inputs(*args: Any, **kwargs: Any) -> Any:
            out = cls._prepare_inputs(runner, *args, **kwargs)
            self.last = out[0]
            return out

        runner._prepare_inputs = prepare_inputs

    def take(self) -> Any:
        out, self.last = self.last, None
        return out
