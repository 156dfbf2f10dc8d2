"""Engine under test: SGLang 0.5.23's real scheduler, radix cache and KV allocator, no model.

The adapter owns no scheduling logic. SGLang's `Scheduler` is built with `__new__` (as
SGLang's own CPU tests do; `build.py` says what it holds) and driven through its
own methods, in the order of `Scheduler.event_loop_normal` (overlap off; with
`async_scheduling` on, of `event_loop_overlap`: `overlap.py`):

    add_request():         Req(...) -> Scheduler.init_req_max_new_tokens -> _add_request_to_queue
    schedule():            Scheduler.get_next_batch_to_run(running_batch, last_batch):
                             merge of the last prefill batch, PrefillAdder (add_chunked_req,
                             add_one_req: radix prefix match, chunking, admission),
                             ScheduleBatch.init_new + prepare_for_extend, or else
                             update_running_batch: check_decode_mem / retract_decode /
                             prepare_for_decode
                           mapped here, per request of the batch (batch order):
                             extend: num_computed = prefix_lens[i], chunk = extend_lens[i]
                             decode: num_computed = seq_lens[i] - 1, chunk = 1
                             mixed (--enable-mixed-chunk): extend rows, then decode rows
                             token_ids = the batch's own prefill_input_ids_cpu; for a
                             decode, the last output token, which SGLang's forward relays
                             through its future map (`overlap_utils.resolve_forward_inputs`;
                             PLACEHOLDER_TOKEN_ID while it is in flight, under overlap)
                             slots = req_to_token[req_pool_idx, :num_end] (what the
                             attention backends gather); the chunk's slots must be the
                             batch's out_cache_loc (checked: a mismatch raises)
                             preempted = requests SGLang retracted back to its waiting queue
    update_from_output():  the sampled tokens as a GenerationBatchResult (next_token_ids,
                           no logits) -> SchedulerBatchResultProcessor
                           .process_batch_result_prefill / _decode (SGLang's own finish
                           checks, checkpoint_kv_cache, release_kv_cache) -> last_batch
    abort_request():       Scheduler.abort_request(AbortReq(rid)): a waiting request leaves
                           at once; a running one is marked and runs one more step, whose
                           output SGLang discards ("abort method 3"): that step's KV write
                           goes to SchedulerOutput.discarded (the simulator has retired the
                           request; the shadow KV still sees the write, which the tree may
                           keep and share)
    kv_snapshot():         SGLang's allocator, tree and rows (`snapshot.py`)

Glue written here instead of SGLang code: `Scheduler.run_batch`'s counters (forward_ct,
forward_iter) and the stand-in model output; nothing else.

Request ids: SGLang aborts by rid *prefix* (`req.rid.startswith(recv_req.rid)`), so the
adapter gives SGLang prefix-free rids (`000000000042`), not the trace's ids.

An exception raised inside SGLang propagates unchanged (the simulator's `engine-crash`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from schedcheck.engines.protocol import (
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    KVSnapshot,
    ScheduledRequest,
    SchedulerOutput,
)
from schedcheck.engines.sglang import stubs

stubs.install()  # before the first sglang import (here or in the helpers below)

from schedcheck.engines.sglang import faults  # noqa: E402
from schedcheck.engines.sglang.build import SglangOptions, build_scheduler  # noqa: E402
from schedcheck.engines.sglang.changes import AllocatorLog  # noqa: E402
from schedcheck.engines.sglang.chunks import Chunk, batch_chunks, check_written  # noqa: E402
from schedcheck.engines.sglang.overlap import LaunchQueue  # noqa: E402
from schedcheck.engines.sglang.paths import RarePaths  # noqa: E402
from schedcheck.engines.sglang.rows import RowReader, page_table  # noqa: E402
from schedcheck.engines.sglang.sessions import SglangSessions  # noqa: E402
from schedcheck.engines.sglang.snapshot import SglangKVSnapshot, waiting_reasons  # noqa: E402
from schedcheck.engines.vllm.common import frontend_rejection, read_only_prompt  # noqa: E402

import torch  # noqa: E402  # isort: skip
from sglang.srt.managers.io_struct import AbortReq  # noqa: E402  # isort: skip
from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req, ScheduleBatch  # noqa: E402  # isort: skip
from sglang.srt.managers.schedule_batch import FINISH_MATCHED_TOKEN  # noqa: E402  # isort: skip
from sglang.srt.managers.utils import GenerationBatchResult  # noqa: E402  # isort: skip
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402  # isort: skip

ENGINE_NAME = "sglang"
VOCAB_SIZE = 1 << 30  # above every hash-model token id
_REASONS = {FINISH_LENGTH: "length", FINISH_MATCHED_TOKEN: "stop"}  # else "abort"


@dataclass
class _Tracked:
    """One of our requests inside SGLang."""

    request_id: str
    req: Req
    reported: bool = False  # finished, aborted or rejected: reported to the simulator
    admitted: bool = False  # scheduled since its last (re)admission
    continues: Callable[[], bool] | None = None  # EngineRequest.continues (sessions.py)


class SglangEngine:
    """The Engine protocol over one SGLang Scheduler (built without a model worker)."""

    name = ENGINE_NAME
    supports_async_scheduling = True  # overlap scheduling: overlap.py

    def __init__(self, config: EngineConfig) -> None:
        assert config.block_manager in ("hashed", "radix"), (
            f"sglang has one KV-cache manager (its radix tree); "
            f"block_manager={config.block_manager!r}"
        )
        if config.num_lookahead_tokens:
            raise ValueError("the sglang adapter does not model speculative decoding")
        self.config = config
        self.options = SglangOptions.from_extra(config.extra)
        self.scheduler = build_scheduler(config, self.options)
        self.rows = RowReader(self.scheduler.req_to_token_pool.req_to_token, config.block_size)
        num_slots = config.num_gpu_blocks * config.block_size
        allocator = self.scheduler.token_to_kv_pool_allocator
        self.allocator_log = AllocatorLog(allocator, num_slots, config.block_size)
        self._by_rid: dict[str, _Tracked] = {}  # SGLang rid -> ours, until SGLang is done
        # two views of _by_rid, kept so that a step reads no waiting request: the ones
        # admitted (since their last admission) and not reported, which are the only
        # ones of ours that can hold a row; and the reported ones SGLang may still hold
        self._admitted: dict[str, _Tracked] = {}
        self._reported: dict[str, _Tracked] = {}
        self._rid_of: dict[str, str] = {}  # our id -> SGLang rid, while live
        self._num_added = 0
        self._step = 0
        self._last: tuple[SchedulerOutput, ScheduleBatch] | None = None  # overlap off
        self._launched = LaunchQueue(self.scheduler, self._process)  # overlap on
        self._pending_finished: list[FinishedRequest] = []
        self._rejected: list[tuple[str, str]] = []
        self._force_retract = False  # fault point "preempt": until a decode step ran
        self._paused_out: tuple[str, ...] = ()  # retracted by a pause, for the next output
        self._sessions = SglangSessions(self.scheduler, self.options.streaming_session)
        self.paths = RarePaths(self._sessions)  # rare paths of SGLang's code reached (coverage)

    # ------------------------------------------------------------------ requests --
    def add_request(self, request: EngineRequest) -> None:
        rid = request.request_id
        assert rid not in self._rid_of, f"duplicate id {rid}"
        reason = frontend_rejection(request.num_prompt_tokens, self.config.max_model_len)
        prompt = read_only_prompt(request.prompt_token_ids)
        eos = request.eos_token_id  # the model's EOS: a stop token (FINISH_MATCHED_TOKEN)
        params = SamplingParams(max_new_tokens=request.max_tokens, ignore_eos=eos is None)
        params.stop_token_ids = None if eos is None else {eos}
        params.normalize(None)
        sgl_rid = f"{self._num_added:012d}"
        self._num_added += 1
        if reason is None and self._sessions.enabled:  # made by its session (sessions.py)
            req = self._sessions.create_req(request, sgl_rid, params, VOCAB_SIZE)
        else:
            req = Req(sgl_rid, "", array("q", prompt.tolist()), params, vocab_size=VOCAB_SIZE,
                      cache_salt=request.cache_salt)  # fmt: skip
        if reason is None:
            self.scheduler.init_req_max_new_tokens(req)
            granted = req.sampling_params.max_new_tokens
            if granted != request.max_tokens or req.to_finish is not None:
                reason = (
                    f"SGLang grants max_new_tokens {granted} of {request.max_tokens} "
                    f"(init_req_max_new_tokens: max_req_len {self.config.max_model_len} - "
                    f"prompt {request.num_prompt_tokens} - 1, or the KV memory budget)"
                )
        if reason is not None:
            self._rejected.append((rid, reason))
            self._sessions.rejected(request)
            return
        self.scheduler._add_request_to_queue(req)
        self._by_rid[sgl_rid] = _Tracked(rid, req, continues=request.continues)
        self._rid_of[rid] = sgl_rid

    def abort_request(self, request_id: str) -> None:
        sgl_rid = self._rid_of.get(request_id)
        if sgl_rid is None:
            return
        tracked = self._by_rid[sgl_rid]
        self.scheduler.abort_request(AbortReq(rid=sgl_rid))
        self._report(tracked, "abort")

    # ---------------------------------------------------------------------- step --
    def schedule(self) -> SchedulerOutput:
        assert self._last is None, "schedule() twice without update_from_output()"
        s = self.scheduler
        self._step += 1
        self._sessions.reap()  # its event loop's: sessions whose close waited for a turn
        if self._launched.pause_pending:  # it waits for the tokens in flight: run nothing
            return SchedulerOutput(step=self._step, scheduled=())
        with faults.forced_retraction(self._force_retract):
            plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        if batch is not None and batch.forward_mode.is_decode():
            self._force_retract = False
        preempted = tuple(sorted({*self._paused_out, *self._retracted()}))
        self._paused_out = ()
        in_flight = self._launched.sampling() if preempted else set()
        scheduled, discarded = self._map_batch(batch) if batch is not None else ((), ())
        rejected, self._rejected = self._rejected, []
        for rid, reason in rejected:
            self._pending_finished.append(FinishedRequest(rid, (), f"rejected: {reason}"))
        dropped = tuple(rid for rid in preempted if rid in in_flight)
        self.paths.observe(batch, len(dropped))
        output = SchedulerOutput(
            step=self._step,
            scheduled=scheduled,
            preempted_req_ids=preempted,
            rejected_req_ids=tuple(rid for rid, _ in rejected),
            rejected_reasons=tuple(reason for _, reason in rejected),
            discarded=discarded,
            # overlap: retracted with a token in flight, which SGLang's result skips
            dropped_req_ids=dropped,
        )
        if self.options.overlap:
            self._launched.step(batch, output if scheduled else None)
        elif batch is None:
            s.last_batch = None  # event_loop_normal: last_batch = batch
        elif scheduled:
            self._last = (output, batch)
        else:  # only requests we aborted: SGLang still runs them once, then frees them
            self._run(batch, {})
        self._forget_done()
        return output

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> list[FinishedRequest]:
        for r in output.scheduled:
            assert (r.request_id in sampled_token_ids) == r.samples, (
                f"{r.request_id}: a token iff its chunk reaches num_tokens"
            )
        if self.options.overlap:
            tokens = self._tokens(self._launched.oldest(), sampled_token_ids)
            if self._launched.complete(output, tokens):  # a pause: retracted everything
                self._paused_out = (*self._paused_out, *self._retracted())
        else:
            assert self._last is not None and self._last[0] is output, "not the last step"
            batch = self._last[1]
            self._last = None
            self._run(batch, sampled_token_ids)
        self._forget_done()
        finished, self._pending_finished = self._pending_finished, []
        return finished

    def _tokens(self, batch: ScheduleBatch, sampled: Mapping[str, int]) -> list[int]:
        """The forward's sampled tokens, in batch order (0: none, or not ours)."""
        return [sampled.get(self._by_rid[r.rid].request_id, 0) for r in batch.reqs]

    def _run(self, batch: ScheduleBatch, sampled: Mapping[str, int]) -> None:
        """event_loop_normal: the forward (run_batch's counters), then its results."""
        s = self.scheduler
        s.forward_ct += 1  # Scheduler.run_batch
        batch.forward_iter = s.forward_ct
        tokens = self._tokens(batch, sampled)
        self._process(batch, GenerationBatchResult(next_token_ids=torch.tensor(tokens)))
        s.last_batch = batch

    def _process(self, batch: ScheduleBatch, result: GenerationBatchResult) -> None:
        """The forward's results through SGLang's own result processing."""
        s = self.scheduler
        if batch.forward_mode.is_extend():
            s.batch_result_processor.process_batch_result_prefill(batch, result)
        else:
            assert batch.forward_mode.is_decode(), f"forward mode {batch.forward_mode}"
            s.batch_result_processor.process_batch_result_decode(batch, result)
        s.tree_cache.flush_pending_backups()
        for req in batch.reqs:
            tracked = self._by_rid[req.rid]
            if req.finished() and not tracked.reported:
                self._report(tracked, _REASONS.get(type(req.finished_reason), "abort"))

    # ------------------------------------------------------------------- mapping --
    def _map_batch(
        self, batch: ScheduleBatch
    ) -> tuple[tuple[ScheduledRequest, ...], tuple[ScheduledRequest, ...]]:
        """(scheduled, discarded): requests we aborted that SGLang runs once more go to
        `discarded` (their KV is written; the simulator retired them)."""
        out: list[ScheduledRequest] = []
        discarded: list[ScheduledRequest] = []
        for chunk in batch_chunks(batch):  # bounded: the batch
            tracked = self._by_rid[chunk.req.rid]
            (discarded if tracked.reported else out).append(self._scheduled(tracked, chunk))
        return tuple(out), tuple(discarded)

    def _scheduled(self, tracked: _Tracked, chunk: Chunk) -> ScheduledRequest:
        req, rid = tracked.req, tracked.request_id
        end = chunk.num_computed_tokens + chunk.num_scheduled_tokens
        if tracked.reported:  # aborted: no row cache, it runs this once more
            row = self.rows.read(req.kv.req_pool_idx, end)
            slots, pages = tuple(row.tolist()), page_table(row, self.config.block_size)
        else:
            slots, pages = self.rows.slots_and_pages(rid, req.kv.req_pool_idx, end)
        check_written(rid, chunk, slots)
        cached = 0 if tracked.admitted else chunk.num_computed_tokens
        if not (tracked.admitted or tracked.reported):
            tracked.admitted = True
            self._admitted[req.rid] = tracked
        return ScheduledRequest(
            rid,
            chunk.num_computed_tokens,
            chunk.num_scheduled_tokens,
            chunk.num_tokens,
            len(req.origin_input_ids),
            chunk.token_ids,
            pages,
            cached,
            slots=slots,
        )

    def _retracted(self) -> tuple[str, ...]:
        """Admitted requests SGLang put back in its waiting queue (retract_decode). Only
        those that lost their row are looked for there: a retraction releases the row."""
        rowless = [(rid, t) for rid, t in self._admitted.items() if not t.req.kv.holds_kv]
        if not rowless:
            return ()
        waiting = {id(r) for r in self.scheduler.waiting_queue}
        out = []
        for sgl_rid, tracked in rowless:  # bounded: the admitted
            if id(tracked.req) in waiting:
                tracked.admitted = False
                del self._admitted[sgl_rid]
                self.rows.forget(tracked.request_id)
                out.append(tracked.request_id)
        return tuple(sorted(out))

    def _report(self, tracked: _Tracked, reason: str) -> None:
        tracked.reported = True
        self._admitted.pop(tracked.req.rid, None)
        self._reported[tracked.req.rid] = tracked
        self._rid_of.pop(tracked.request_id, None)
        self.rows.forget(tracked.request_id)
        outputs = tuple(int(t) for t in tracked.req.output_ids_through_stop)
        self._pending_finished.append(FinishedRequest(tracked.request_id, outputs, reason))
        self._sessions.finished(tracked.request_id, reason, tracked.continues)

    def _forget_done(self) -> None:
        """Drop reported requests SGLang holds no more (no row, not queued, not chunked,
        in no batch in flight)."""
        released = [rid for rid, t in self._reported.items() if not t.req.kv.holds_kv]
        if not released:
            return
        s = self.scheduler
        queued = {id(r) for r in s.waiting_queue}
        if s.chunked_req is not None:
            queued.add(id(s.chunked_req))
        queued.update(id(r) for batch, _ in s.result_queue for r in batch.reqs)
        for rid in released:  # bounded: the reported requests
            if id(self._by_rid[rid].req) not in queued:
                del self._by_rid[rid], self._reported[rid]

    def inject_fault(self, kind: str, rng: np.random.Generator) -> str | None:
        """Fault points of sim/faults.py through SGLang's own hooks (faults.py)."""
        if kind == "preempt":
            chunked = self.scheduler.chunked_req
            if chunked is not None and not chunked.finished() and rng.random() < 0.5:
                what = self._launched.pause()  # at once, or after the batch in flight
                if not self._launched.pause_pending:
                    # found now: the next schedule() may admit them again before it looks
                    self._paused_out = (*self._paused_out, *self._retracted())
                return what
            self._force_retract = True
            return "SGLANG_TEST_RETRACT until the next decode step"
        if kind == "evict":
            return faults.evict(self.scheduler.tree_cache, self.config.block_size, rng)
        return None

    # ----------------------------------------------------------------- inspection --
    def kv_snapshot(self) -> KVSnapshot:
        # the live requests holding a row (all the snapshot reads: only admitted ones can
        # hold one), and those reported that SGLang still holds; in SGLang rid order, the
        # order of _by_rid
        admitted = [self._admitted[rid] for rid in sorted(self._admitted)]
        live = {t.request_id: t.req for t in admitted if t.req.kv.holds_kv}
        hidden = [self._reported[rid].req for rid in sorted(self._reported)]
        return SglangKVSnapshot(self.scheduler, self.config, live, hidden, self.allocator_log,
                                self._sessions)  # fmt: skip

    def rare_path_counts(self) -> Mapping[str, int]:
        """Rare paths of SGLang's own code reached so far (sim/coverage.py)."""
        return self.paths.counts()

    def has_unfinished_requests(self) -> bool:
        """Our live requests, rejections to report, and requests we aborted that SGLang
        still holds (their KV is freed by the step that finishes them)."""
        return bool(self._by_rid) or bool(self._rejected)

    def waiting_reasons(self) -> Mapping[str, str]:
        waiting = [(t.request_id, t.req) for t in self._by_rid.values() if not t.reported]
        return waiting_reasons(self.scheduler, waiting)


def make_engine(config: EngineConfig) -> SglangEngine:
    """Factory named in the engine registry ("sglang")."""
    return SglangEngine(config)
