"""vLLM's SchedulerOutput read as ours (a mixin of the vllm-v1 adapter, adapter.py): the
runner's block tables updated as vLLM's model runner updates them (runner.py), each
scheduled request's chunk, in vLLM's batch order, named by the turn that runs it
(sessions.py: vLLM names a streaming-input session by its first request's id)."""

from __future__ import annotations

import numpy as np

from schedcheck.engines.engine_fault import EngineFault
from schedcheck.engines.protocol import FinishedRequest, ScheduledRequest, SchedulerOutput
from schedcheck.engines.vllm.common import RunnerBlockTables, TokenBuffer
from schedcheck.engines.vllm.v1 import eras
from schedcheck.engines.vllm.v1.runner import check_drafts_follow_tokens, update_runner_tables
from schedcheck.engines.vllm.v1.sessions import Sessions

from vllm.v1.core.sched.output import SchedulerOutput as VllmSchedulerOutput  # isort: skip
from vllm.v1.request import Request  # isort: skip

Ids = tuple[str, ...]


class OutputMapping:
    """Maps vLLM's scheduler output; reads the adapter's requests, tokens and tables."""

    _step: int
    _group_tables: list[RunnerBlockTables]
    _tables: RunnerBlockTables
    _live: dict[str, Request]
    _tokens: dict[str, TokenBuffer]
    _rejected: list[tuple[str, str]]
    _pending_finished: list[FinishedRequest]
    _depth: int
    _num_groups: int
    _sessions: Sessions

    def _map_output(
        self, so: VllmSchedulerOutput, preempted: set[str], by_fault: set[str], dropped: Ids
    ) -> SchedulerOutput:
        """Our SchedulerOutput from vLLM's, in vLLM's batch order (num_scheduled_tokens);
        `by_fault`: preempted before the call (faults.py), which it may schedule again,
        of which `dropped` lose their samples in flight (ids: ours)."""
        self._step += 1
        for tables in self._group_tables:
            tables.drop(so.finished_req_ids)
        computed, admitted = update_runner_tables(so, self._group_tables)
        unmapped = set(so.num_scheduled_tokens) - set(computed)
        # vLLM 0.10.1.1 and 0.11.0, priority policy: a request preempted after it was
        # scheduled in the same call stays in num_scheduled_tokens (fixed in 0.11.1), its
        # blocks freed; 0.11.0 lists it as neither new nor cached, 0.10.1.1 as cached. The
        # engine's fault, reported before the runner would use those blocks.
        stale = sorted(unmapped | (set(so.num_scheduled_tokens) & preempted))
        if stale:
            raise EngineFault(
                "engine-crash",
                f"vLLM scheduled {stale} in num_scheduled_tokens though it preempted "
                f"{sorted(set(stale) & preempted)} in the same call (listed as neither a new "
                f"nor a cached request: {sorted(unmapped)})",
                case="scheduled and preempted by one schedule() call",
            )
        spec = so.scheduled_spec_decode_tokens
        scheduled = tuple(
            self._scheduled_request(rid, n, computed[rid], rid in admitted, spec.get(rid))
            for rid, n in so.num_scheduled_tokens.items()
        )
        rejected, self._rejected = self._rejected, []
        for rid, reason in rejected:
            self._pending_finished.append(FinishedRequest(rid, (), f"rejected: {reason}"))
        turn_id = self._sessions.turn_id
        finished = tuple(sorted(map(turn_id, so.finished_req_ids)))
        self._sessions.forget(so.finished_req_ids)
        return SchedulerOutput(
            step=self._step,
            scheduled=scheduled,
            preempted_req_ids=tuple(sorted(map(turn_id, preempted | by_fault))),
            finished_req_ids=finished,
            rejected_req_ids=tuple(rid for rid, _ in rejected),
            rejected_reasons=tuple(reason for _, reason in rejected),
            block_copies=eras.block_copies(so),
            dropped_req_ids=dropped,
        )

    def _scheduled_request(
        self,
        rid: str,
        num_scheduled: int,
        num_computed: int,
        admitted: bool,
        spec_token_ids: list[int] | None,
    ) -> ScheduledRequest:
        """Request `rid`'s (vLLM's id) chunk, named by its turn."""
        turn = self._sessions.turn_id(rid)
        request, tokens = self._live[turn], self._tokens[turn]
        # schedule() advanced vLLM's count to `end`; where it did not, the check after the
        # update reports both counts (accounting.manager-agreement), not a crash
        end = num_computed + num_scheduled
        if spec_token_ids:  # the runner appends the drafts after the known tokens
            check_drafts_follow_tokens(rid, num_computed, num_scheduled, spec_token_ids)
            stop = end - len(spec_token_ids)
            if self._depth > 1:  # async: vLLM's own placeholders (-1); every draft accepted
                num_tokens, known = stop, tokens.chunk_with_placeholders(num_computed, stop)
            else:
                num_tokens, known = tokens.num_tokens, tokens.chunk(num_computed, stop)
            chunk = np.concatenate([known, np.asarray(spec_token_ids, dtype=np.int64)])
        elif self._depth > 1 and end > tokens.num_tokens:  # async: runs in-flight samples
            num_tokens, chunk = end, tokens.chunk_with_placeholders(num_computed, end)
        else:
            num_tokens, chunk = tokens.num_tokens, tokens.chunk(num_computed, end)
        return ScheduledRequest(  # positional, in field order: this runs per request per step
            turn,
            num_computed,
            num_scheduled,
            num_tokens,  # == request.num_tokens (+ placeholders): the tokens the runner knows
            request.num_prompt_tokens,
            chunk,
            self._tables.table(rid),
            num_computed if admitted else 0,
            None,  # slots: vLLM addresses KV per block
            tuple(spec_token_ids or ()),
            tuple(t.table(rid) for t in self._group_tables) if self._num_groups > 1 else (),
        )
