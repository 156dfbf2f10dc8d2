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
    kv_snapshot():         vLLM's own BlockPool / manager (the vllm-v1 adapter's snapshot)

The SchedulerOutput is mapped from vLLM's scheduler output as the runner's `_update_states`
reads it (block tables set from block_ids[0] for new and resumed requests, appended with
new_block_ids[0]), independently of the runner: the shadow KV then checks the runner's
metadata against what the scheduler decided, so a runner bug is a finding.

Not modelled (refused by the factory, see factory.py): speculative decoding, async
scheduling, several KV-cache groups, priorities (FCFS only). An exception inside vLLM
propagates unchanged: the simulator records an `engine-crash`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

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
    RunnerBlockTables,
    TokenBuffer,
    frontend_rejection,
    read_only_prompt,
)
from schedcheck.engines.vllm.engine import model, shadow_backend
from schedcheck.engines.vllm.engine.model import DEFAULT_VOCAB_SIZE

ENGINE_NAME = "vllm-engine"
ARRIVAL_TIME_TICK_S = 1e-6  # as the vllm-v1 adapter: arrival stamps never tie
# the KV snapshot of the vllm-v1 adapter reads vLLM's BlockPool; its module moved with
# the adapters' reorganisation: the first that imports
SNAPSHOT_MODULES = ("schedcheck.engines.vllm.v1.snapshot", "schedcheck.engines.vllm.v1_snapshot")


def _snapshot_class() -> Any:
    errors = []
    for name in SNAPSHOT_MODULES:  # bounded: two candidates
        try:
            return importlib.import_module(name).V1KVSnapshot
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError("; ".join(errors))


def engine_args(config: EngineConfig, model_dir: str, vocab_size: int) -> Any:
    """vLLM's EngineArgs for `config`: the tiny model, dummy weights, eager, the shadow backend."""
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=model_dir,
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        block_size=config.block_size,
        num_gpu_blocks_override=config.num_gpu_blocks,
        enable_chunked_prefill=config.enable_chunked_prefill,
        enable_prefix_caching=config.enable_prefix_caching,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        attention_backend="CUSTOM",
    )


@contextlib.contextmanager
def shadow_backend_selected() -> Iterator[None]:
    """vLLM's CUSTOM backend is ours; while the engine is built, CPU_ATTN's slot too.

    vLLM's CPU platform picks CPU_ATTN whatever backend is asked for ("Cannot use ...
    backend on CPU"), and resolves it through the same registry: overriding that entry
    for the build is how the CUSTOM backend reaches a CPU engine. Restored afterwards."""
    from vllm.v1.attention.backends import registry

    enum = registry.AttentionBackendEnum
    registry.register_backend(enum.CUSTOM, shadow_backend.CLASS_PATH)
    previous = registry._ATTN_OVERRIDES.get(enum.CPU_ATTN)
    registry.register_backend(enum.CPU_ATTN, shadow_backend.CLASS_PATH)
    try:
        yield
    finally:
        if previous is None:
            registry._ATTN_OVERRIDES.pop(enum.CPU_ATTN, None)
        else:
            registry._ATTN_OVERRIDES[enum.CPU_ATTN] = previous


@contextlib.contextmanager
def pool_size_check_skipped() -> Iterator[None]:
    """vLLM refuses at start-up a pool that cannot hold one max_model_len request; the
    fuzzer draws small pools (as the vllm-v1 adapter, which builds the Scheduler itself,
    never meets that check). A request larger than the pool is then the scheduler's to
    handle, as in vllm-v1."""
    from vllm.v1.core import kv_cache_utils

    original = kv_cache_utils._check_enough_kv_cache_memory
    kv_cache_utils._check_enough_kv_cache_memory = lambda *args, **kwargs: None
    try:
        yield
    finally:
        kv_cache_utils._check_enough_kv_cache_memory = original


def build_engine_core(config: EngineConfig, model_dir: str, vocab_size: int) -> Any:
    """vLLM's EngineCore in this process, running the shadow attention backend."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor.abstract import Executor

    model.redraw_dummy_weights()
    vllm_config = engine_args(config, model_dir, vocab_size).create_engine_config()
    with shadow_backend_selected(), pool_size_check_skipped():
        return EngineCore(vllm_config, Executor.get_class(vllm_config), log_stats=False)


class ForcedSampler:
    """vLLM's sampler, with the sampled ids of the requests the harness names replaced.

    The runner's logits rows follow its persistent batch (`input_batch.req_ids`); a row of
    a request with no forced token keeps vLLM's own sample (the runner discards it: a
    partial prefill chunk)."""

    def __init__(self, sampler: Any, input_batch_of: Any) -> None:
        self.sampler = sampler
        self.input_batch_of = input_batch_of
        self.forced: Mapping[str, int] = {}

    def __call__(self, logits: Any, sampling_metadata: Any) -> Any:
        out = self.sampler(logits=logits, sampling_metadata=sampling_metadata)
        req_ids = self.input_batch_of().req_ids
        ids = out.sampled_token_ids
        for row, rid in enumerate(req_ids[: ids.shape[0]]):  # bounded: the batch
            token = self.forced.get(rid)
            if token is not None:
                ids[row, 0] = int(token)
                ids[row, 1:] = -1
        return out


class VllmWholeEngine:
    """The Engine protocol over one in-process vLLM EngineCore (scheduler + CPU runner)."""

    name = ENGINE_NAME
    supports_async_scheduling = False

    def __init__(self, config: EngineConfig, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        self.config = config
        self._model_dir = model.write_model_dir(vocab_size, config.max_model_len)
        try:
            self.core = build_engine_core(config, str(self._model_dir), vocab_size)
        finally:
            shutil.rmtree(self._model_dir, ignore_errors=True)
        self.scheduler = self.core.scheduler
        self.runner = self.core.model_executor.driver_worker.worker.model_runner
        self.sampler = ForcedSampler(self.runner.sampler, lambda: self.runner.input_batch)
        self.runner.sampler = self.sampler
        self._snapshot_cls = _snapshot_class()
        self._tokens: dict[str, TokenBuffer] = {}
        self._live: dict[str, Any] = {}  # request id -> vLLM Request, until reported
        self._tables = RunnerBlockTables()
        self._step = 0
        self._in_flight: tuple[SchedulerOutput, Any] | None = None
        self._runner_meta: dict[int, RunnerMetadata] = {}
        self._pending_finished: list[FinishedRequest] = []
        self._rejected: list[tuple[str, str]] = []
        self._last_arrival_time_s = -ARRIVAL_TIME_TICK_S
        shadow_backend.RECORDER.take()  # anything a profiling run left

    # ------------------------------------------------------------------ requests --
    def add_request(self, request: EngineRequest) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        rid = request.request_id
        assert rid not in self._live, f"duplicate id {rid}"
        reason = frontend_rejection(request, self.config.max_model_len)
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
            block_hasher=self.core.request_block_hasher,
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
        vllm_output = self.scheduler.schedule()
        runner_output = self.core.model_executor.execute_model(vllm_output)
        output = self._map_output(vllm_output)
        if runner_output is not None:  # nothing ran (EngineCore.step's empty path)
            assert not output.scheduled, "the runner sampled without the harness"
            self._apply(vllm_output, runner_output or EMPTY_MODEL_RUNNER_OUTPUT)
            shadow_backend.RECORDER.take()
            return output
        self._runner_meta[output.step] = self._read_runner_metadata(output)
        self._in_flight = (output, vllm_output)
        return output

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
        snapshot: KVSnapshot = self._snapshot_cls(self.scheduler, self.config.block_size, 0)
        return snapshot

    def has_unfinished_requests(self) -> bool:
        return bool(self.scheduler.has_unfinished_requests()) or bool(self._rejected)

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
        return runner_metadata_of(recorded[0], output, self.runner)

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


def runner_metadata_of(
    m: shadow_backend.ShadowAttentionMetadata, output: SchedulerOutput, runner: Any
) -> RunnerMetadata:
    """A RunnerMetadata holding vLLM's own indices (the fields engines/metadata.py
    derives, taken from what vLLM's runner handed its attention backend)::

        query_start_loc, seq_lens, slot_mapping   <- CommonAttentionMetadata
        block_tables[i]   <- block_table_tensor[i, :ceil(seq_lens[i] / block_size)]
                             (the entries the kernel reads; vLLM pads rows with 0)
        positions, input_ids                      <- the runner's input buffers
        num_computed_tokens                       <- seq_lens - query lens
    """
    n = m.num_actual_tokens
    qsl, seq_lens = m.query_start_loc, m.seq_lens
    query_lens = np.diff(qsl)
    positions = m.positions if m.positions is not None else _buffer(runner.positions, n)
    input_ids = _buffer(runner.input_ids, n)
    widths = -(-seq_lens // m.block_size)
    tables = tuple(tuple(int(b) for b in m.block_table[i, : widths[i]]) for i in range(m.num_reqs))
    sampling = [i for i, r in enumerate(output.scheduled) if r.samples]
    return RunnerMetadata(
        output=output,
        block_size=m.block_size,
        req_ids=tuple(r.request_id for r in output.scheduled),
        num_computed_tokens=seq_lens - query_lens,
        query_start_loc=qsl,
        seq_lens=seq_lens,
        positions=positions,
        input_ids=input_ids,
        slot_mapping=m.slot_mapping,
        logits_indices=(qsl[1:][sampling] - 1).astype(np.int64),
        sampling_req_ids=tuple(output.scheduled[i].request_id for i in sampling),
        block_tables=tables,
    )


def _buffer(buf: Any, n: int) -> np.ndarray:
    """The first n entries of one of the runner's input buffers, as int64."""
    tensor = getattr(buf, "cpu", buf)
    return np.asarray(tensor[:n].numpy(), dtype=np.int64).copy()
