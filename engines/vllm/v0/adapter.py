"""Engine under test: vLLM v0's real Scheduler (0.5.4 or 0.6.0, whichever is installed) with
block manager v1 or v2 (`EngineConfig.block_manager`), driven with no model. Where the two
releases differ, a shim of engines/vllm/v0/eras.py picks the branch by a feature test.

Per step, as `LLMEngine.step()` of that release does it:

    schedule():            Scheduler.schedule() -> (seq_group_metadata_list, SchedulerOutputs)
                           get_and_reset_finished_requests_ids() when the batch is not empty
                           each SequenceGroupMetadata -> what the model runner derives from
                           it (runner.py: context_len, seq_len, prefix-cache-hit
                           branch of that release) -> our ScheduledRequest
    update_from_output():  per scheduled group: update_num_computed_tokens(token_chunk_size);
                           if do_sample: the real SingleStepOutputProcessor (+ StopChecker,
                           detokenize=False) appends our sampled token and stops the sequence;
                           then free_finished_seq_groups()
    abort_request():       Scheduler.abort_seq_group(request_id)
    kv_snapshot():         the block manager's own state (snapshot.py)

ScheduledRequest for v0 (one sequence per group):
    num_computed_tokens  = the runner's context_len (after its prefix-cache-hit branch), so
                           the shadow-KV oracle checks the KV the real runner would read
    num_scheduled_tokens = the runner's query length (seq_len - context_len), which is the
                           scheduler's token_chunk_size unless the hit branch moved context_len
    num_cached_tokens    = context_len when the hit branch moved it, else 0
    block_table          = the block manager's table for the sequence (what flash-attn gets)

A group aborted between schedule() and update_from_output() is skipped in the update, as
0.6.0's `_process_model_outputs` skips finished groups (in the synchronous engine of either
version an abort never lands inside a step). Exceptions raised inside vLLM, or by the runner
model (RuntimeError of 0.5.4's runner, RunnerInputError), propagate to the caller.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

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
    TokenBuffer,
    read_only_prompt,
    refuse_lookahead,
)
from schedcheck.engines.vllm.v0 import eras
from schedcheck.engines.vllm.v0.build import (
    VLLM_VERSION,
    build_v0,
    make_sequence_group,
    sampler_output,
)
from schedcheck.engines.vllm.v0.runner import runner_seq_inputs
from schedcheck.engines.vllm.v0.snapshot import V0KVSnapshot, gpu_evictor

from vllm.sequence import SequenceGroup, SequenceStatus  # isort: skip

ENGINE_NAME = "vllm-v0"


class VllmV0Engine:
    """The Engine protocol over one vLLM v0 Scheduler."""

    name = ENGINE_NAME

    def __init__(self, config: EngineConfig) -> None:
        refuse_lookahead(config)
        built = build_v0(config)
        self.config = config
        self.version = VLLM_VERSION  # for reports only: branches go by eras.py
        self._async_output_proc = eras.has_async_output_processor()
        self._hits_inside_chunks = not eras.runner_refuses_chunked_prefix_hits()
        self.scheduler = built.scheduler
        self._processor = built.output_processor
        self._chunked = built.scheduler_config.chunked_prefill_enabled
        self._clock = built.clock
        self._seq_ids = itertools.count()
        self._groups: dict[str, SequenceGroup] = {}  # added, not yet reported finished
        self._tokens: dict[str, TokenBuffer] = {}  # request id -> prompt + outputs
        self._step = 0
        self._last: tuple[SchedulerOutput, list, Any] | None = None
        self._pending_finished: list[FinishedRequest] = []
        evictor = gpu_evictor(self.scheduler.block_manager)
        self._evictions = CallCounter(evictor, "evict", lambda _: True)

    # ------------------------------------------------------------------ requests --
    def add_request(self, request: EngineRequest) -> None:
        rid = request.request_id
        assert rid not in self._groups, f"duplicate id {rid}"
        assert request.eos_token_id is None, "EOS stops are not driven here (eos=False)"
        if request.cache_salt is not None:  # refused, not ignored: ignoring shares across salts
            raise ValueError(f"{rid}: vLLM v0 has no cache_salt (vLLM added it in v1)")
        prompt = read_only_prompt(request.prompt_token_ids)
        group = make_sequence_group(request, next(self._seq_ids), self.config.block_size)
        self.scheduler.add_seq_group(group)
        self._groups[rid] = group
        self._tokens[rid] = TokenBuffer(prompt, request.max_tokens)

    def abort_request(self, request_id: str) -> None:
        group = self._groups.get(request_id)
        if group is None or group.is_finished():
            return
        self.scheduler.abort_seq_group(request_id)
        assert group.is_finished(), f"abort_seq_group left {request_id} unfinished"
        self._report_finished(group, "abort")

    # ---------------------------------------------------------------------- step --
    def schedule(self) -> SchedulerOutput:
        assert self._last is None, "schedule() twice without update_from_output()"
        self._step += 1
        self._clock.now_s = float(self._step)
        running_before = [g.request_id for g in self.scheduler.running]
        result = self.scheduler.schedule()  # 0.6.0 adds allow_async_output_proc
        metas, outputs = result[0], result[1]
        finished_ids: tuple[str, ...] = ()
        if not outputs.is_empty():
            finished_ids = tuple(sorted(self.scheduler.get_and_reset_finished_requests_ids()))
        scheduled = tuple(
            self._scheduled_request(meta, ssg.seq_group)
            for meta, ssg in zip(metas, outputs.scheduled_seq_groups, strict=True)
        )
        rejected = self._take_ignored(outputs.ignored_seq_groups)
        assert not outputs.blocks_to_swap_in and not outputs.blocks_to_swap_out, "no CPU blocks"
        output = SchedulerOutput(
            step=self._step,
            scheduled=scheduled,
            preempted_req_ids=self._preempted(running_before),
            finished_req_ids=finished_ids,
            rejected_req_ids=tuple(rid for rid, _ in rejected),
            rejected_reasons=tuple(reason for _, reason in rejected),
            block_copies=tuple((int(src), int(dst)) for src, dst in outputs.blocks_to_copy),
        )
        if scheduled:
            self._last = (output, metas, outputs)
        else:  # LLMEngine.step() processes an empty step's outputs too (the loop does not call)
            self._process_outputs(metas, outputs, {})
        return output

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> list[FinishedRequest]:
        assert self._last is not None and self._last[0] is output, "not the last step"
        _, metas, outputs = self._last
        self._last = None
        self._process_outputs(metas, outputs, sampled_token_ids)
        finished, self._pending_finished = self._pending_finished, []
        return finished

    def _process_outputs(
        self, metas: list, outputs: Any, sampled_token_ids: Mapping[str, int]
    ) -> None:
        """LLMEngine._process_model_outputs for one step of single-sequence groups."""
        finished_now = []
        for meta, ssg in zip(metas, outputs.scheduled_seq_groups, strict=True):
            group = ssg.seq_group
            if group.is_finished():  # aborted after schedule()
                continue
            group.update_num_computed_tokens(ssg.token_chunk_size)
            if meta.do_sample:
                token_id = int(sampled_token_ids[group.request_id])
                self._process_sample(group, token_id)
                self._tokens[group.request_id].append(token_id)
                assert _seq(group).get_len() == self._tokens[group.request_id].num_tokens
            if group.is_finished():
                finished_now.append(group)
        if finished_now or not self._async_output_proc:  # 0.5.4 frees every step
            self.scheduler.free_finished_seq_groups()
        for group in finished_now:
            self._report_finished(group, SequenceStatus.get_finished_reason(_seq(group).status))

    # ----------------------------------------------------------------- inspection --
    def kv_snapshot(self) -> KVSnapshot:
        return V0KVSnapshot(
            self.scheduler, self.config.block_size, self._live_seqs, self._evictions.num_calls
        )

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_seqs()  # _pending_finished: already finished

    def waiting_reasons(self) -> Mapping[str, str]:
        free = self.scheduler.block_manager.get_num_free_gpu_blocks()
        running = len(self.scheduler.running)
        return {
            g.request_id: f"{_seq(g).status.name}: {running} running, {free} free blocks"
            for queue in (self.scheduler.waiting, self.scheduler.swapped)
            for g in queue
        }

    # ------------------------------------------------------------------- mapping --
    def _scheduled_request(self, meta, group: SequenceGroup) -> ScheduledRequest:
        seq = _seq(group)
        data = meta.seq_data[seq.seq_id]
        num_tokens = data.get_len()
        view = runner_seq_inputs(
            hits_inside_chunks=self._hits_inside_chunks,
            is_prompt=meta.is_prompt,
            num_computed_tokens=data.get_num_computed_tokens(),
            seq_data_len=num_tokens,
            token_chunk_size=meta.token_chunk_size,
            num_computed_blocks=len(meta.computed_block_nums or ()),
            block_size=self.config.block_size,
            chunked_prefill_enabled=self._chunked,
        )
        assert meta.do_sample == (view.seq_len == num_tokens), group.request_id
        return ScheduledRequest(
            request_id=group.request_id,
            num_computed_tokens=view.context_len,
            num_scheduled_tokens=view.query_len,
            num_tokens=num_tokens,
            num_prompt_tokens=data.get_prompt_len(),
            token_ids=self._tokens[group.request_id].chunk(view.context_len, view.seq_len),
            block_table=tuple(meta.block_tables[seq.seq_id]),
            num_cached_tokens=view.context_len if view.hit_moved_context else 0,
        )

    def _process_sample(self, group: SequenceGroup, token_id: int) -> None:
        step_output = [sampler_output(_seq(group).seq_id, int(token_id))]
        self._processor.process_prompt_logprob(group, step_output)
        if self._async_output_proc:
            self._processor.process_outputs(group, step_output, False)  # is_async
        else:
            self._processor.process_outputs(group, step_output)

    def _preempted(self, running_before: list[str]) -> tuple[str, ...]:
        """Groups running before schedule() that it sent back to waiting (recompute)."""
        return tuple(
            sorted(
                rid
                for rid in running_before
                if _seq(self._groups[rid]).status == SequenceStatus.WAITING
            )
        )

    def _take_ignored(self, ignored: list) -> list[tuple[str, str]]:
        """The scheduler's ignored groups (prompt too long for it or for the KV cache)."""
        rejected = []
        for group in ignored:
            reason = f"{_seq(group).status.name}: the v0 scheduler ignored the prompt"
            rejected.append((group.request_id, reason))
            self._groups.pop(group.request_id)
            self._tokens.pop(group.request_id)
            self._pending_finished.append(
                FinishedRequest(group.request_id, (), f"rejected: {reason}")
            )
        return rejected

    def _report_finished(self, group: SequenceGroup, reason: str) -> None:
        rid = group.request_id
        self._groups.pop(rid)
        self._tokens.pop(rid)
        outputs = tuple(int(t) for t in _seq(group).get_output_token_ids())
        self._pending_finished.append(FinishedRequest(rid, outputs, reason))

    def _live_seqs(self) -> dict:
        return {rid: _seq(g) for rid, g in self._groups.items()}


def _seq(group: SequenceGroup):
    """The one sequence of a group (n=1, no beam search)."""
    assert len(group.seqs) == 1
    return group.seqs[0]


def make_engine(config: EngineConfig) -> VllmV0Engine:
    """Factory named in the engine registry ("vllm-v0"); block_manager "v1" or "v2"."""
    return VllmV0Engine(config)
