"""Token accounting: every step runs each request's next tokens, once, within the budget.

Properties (each checked every step):
- budget: the step's scheduled tokens total at most max_num_batched_tokens (only its
  prompt tokens, for an engine whose decodes are not bounded by the budget by design), and
  at most max_num_seqs requests run; no request appears twice;
- range: 0 <= num_computed_tokens, num_scheduled_tokens >= 1, and
  num_computed_tokens + num_scheduled_tokens <= num_tokens, so at least one token of a fully
  cached prompt is still computed (vllm#7753: logits are needed);
- chunk: the chunk holds exactly num_scheduled_tokens token ids;
- contiguity: a request's chunks follow each other with no gap or overlap; only a
  (re)admission (first schedule, or after a preemption) may start elsewhere, and then at
  its prefix-cache hit length (num_cached_tokens). A chunk may also jump forward past the
  previous one when the engine declares the skipped tokens a cache hit
  (num_cached_tokens == num_computed_tokens: vLLM v0.6.0's runner does this mid-prefill);
  the shadow KV then reads every skipped key, so a hit on unwritten KV is still caught;
- blocks: the block table holds at least cdiv(num_computed + num_scheduled, block_size)
  blocks (vllm#7380: off by one at exact multiples);
- max-model-len: no position runs at or past max_model_len (num_computed + num_scheduled,
  drafts included, <= max_model_len), and the block table holds at most
  cdiv(max_model_len, block_size) blocks: the width of the model runner's block table and
  the range of its positions, past which a kernel reads or writes out of bounds;
- knowledge: num_tokens equals the tokens the request really has (prompt + outputs);
- agreement: after the update, the KV manager's num_computed_tokens equals the
  scheduler's (vllm#11186);
- drafts (speculative decoding): a chunk may run past num_tokens only by its scheduled
  draft tokens, and then its next chunk starts after the last accepted draft
  (`roll_back`): the rejected drafts' KV is recomputed, never kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from schedcheck.engines.protocol import EngineConfig, ScheduledRequest, SchedulerOutput
from schedcheck.invariants.violation import Violation

Report = Callable[..., None]  # report(invariant, message, **Violation fields)


class AccountingChecker:
    """Holds, per running request, where its next chunk must start."""

    def __init__(self, config: EngineConfig, decodes_within_budget: bool = True) -> None:
        self.config = config
        self.decodes_within_budget = decodes_within_budget
        self.next_start: dict[str, int] = {}  # request id -> num_computed after its last step
        self.max_model_len = config.max_model_len
        self.max_blocks = -(-config.max_model_len // config.block_size)  # the runner's width

    def check_step(
        self, output: SchedulerOutput, known_num_tokens: Mapping[str, int]
    ) -> list[Violation]:
        step = output.step
        for rid in output.preempted_req_ids + output.finished_req_ids:
            self.next_start.pop(rid, None)
        total, out = self._check_requests(step, output.scheduled, known_num_tokens)
        return [*self._check_budget(output, total), *out]

    def _check_requests(
        self, step: int, scheduled: tuple[ScheduledRequest, ...], known: Mapping[str, int]
    ) -> tuple[int, list[Violation]]:
        """(the step's scheduled tokens, the findings of every chunk): each request's
        properties at once, the detail only on a failure."""
        out: list[Violation] = []
        seen: set[str] = set()
        total = 0
        bs, next_start = self.config.block_size, self.next_start
        max_model_len, max_blocks = self.max_model_len, self.max_blocks
        for req in scheduled:  # bounded: the step's requests
            rid = req.request_id
            ncomp, nsched, ntok = req.num_computed_tokens, req.num_scheduled_tokens, req.num_tokens
            total += nsched
            end = ncomp + nsched
            ndraft = len(req.spec_token_ids)
            start = next_start.get(rid)
            if (  # the common case, all properties at once; the detail only on a failure
                rid not in seen
                and 0 <= ncomp < ntok
                and 1 <= nsched <= ntok + ndraft - ncomp
                and (ndraft == 0 or end - ndraft == ntok)
                and req.token_ids.size == nsched
                and known.get(rid, ntok) == ntok
                and end <= (num_blocks := len(req.block_table)) * bs
                and end <= max_model_len
                and num_blocks <= max_blocks
                and (ncomp == start or (ncomp == req.num_cached_tokens and (start or 0) <= ncomp))
            ):
                seen.add(rid)
                next_start[rid] = end
                continue
            if rid in seen:
                out.append(
                    Violation(
                        "accounting.duplicate", step, "scheduled twice in one step", request_id=rid
                    )
                )
            seen.add(rid)
            out.extend(self._check_request(step, req, known.get(rid)))
        return total, out

    def _check_budget(self, output: SchedulerOutput, total: int) -> list[Violation]:
        """budget: `total` scheduled tokens (less the decodes' where they are not bounded by
        it) within max_num_batched_tokens, and at most max_num_seqs requests."""
        cfg, step = self.config, output.step
        out: list[Violation] = []
        if not self.decodes_within_budget:
            total -= sum(r.num_scheduled_tokens for r in output.scheduled if _decodes(r))
        if total > cfg.max_num_batched_tokens:
            out.append(
                Violation(
                    "accounting.budget",
                    step,
                    f"{total} tokens scheduled, max_num_batched_tokens is "
                    f"{cfg.max_num_batched_tokens}",
                    expected=f"<= {cfg.max_num_batched_tokens}",
                    found=str(total),
                )
            )
        if len(output.scheduled) > cfg.max_num_seqs:
            out.append(
                Violation(
                    "accounting.max-num-seqs",
                    step,
                    f"{len(output.scheduled)} requests run, max_num_seqs is {cfg.max_num_seqs}",
                )
            )
        return out

    def _check_request(self, step: int, req, known: int | None) -> list[Violation]:
        """Every property of one request's chunk, each failure on its own (the detail of a
        failure of the fast path of `check_step`)."""
        out: list[Violation] = []

        def bad(invariant: str, message: str, **kw: Any) -> None:
            out.append(Violation(invariant, step, message, request_id=req.request_id, **kw))

        _check_range(req, bad)
        _check_chunk(req, known, self.config.block_size, bad)
        _check_length(req, self.max_model_len, self.max_blocks, bad)
        self._check_start(req, bad)
        self.next_start[req.request_id] = req.num_end_tokens
        return out

    def _check_start(self, req, bad: Report) -> None:
        """contiguity: the chunk starts where the previous one ended, or, at a (re)admission,
        at the prefix-cache hit; a jump forward only onto a declared cache hit."""
        ncomp, start = req.num_computed_tokens, self.next_start.get(req.request_id)
        if start is None:
            if ncomp != req.num_cached_tokens:
                bad(
                    "accounting.admission",
                    f"admitted at num_computed_tokens {ncomp}, but its prefix-cache hit is "
                    f"{req.num_cached_tokens} tokens",
                    position=ncomp,
                )
        elif ncomp != start and not (ncomp > start and ncomp == req.num_cached_tokens):
            kind = "gap" if ncomp > start else "overlap"
            bad(
                "accounting.contiguity",
                f"chunk starts at {ncomp}, the previous one ended at {start} ({kind})",
                position=min(ncomp, start),
                expected=str(start),
                found=str(ncomp),
            )

    def check_agreement(
        self,
        step: int,
        manager_computed: Mapping[str, int],
        unapplied_rejections: Mapping[str, int] | None = None,
    ) -> list[Violation]:
        """After the update: the KV manager counts the same computed tokens as the scheduler.

        `unapplied_rejections` (async scheduling): drafts the runner has rejected in a step
        whose output the engine has not applied yet; the engine still counts them."""
        out = []
        pending = unapplied_rejections or {}
        for rid, next_start in self.next_start.items():
            have = manager_computed.get(rid)
            start = next_start + pending.get(rid, 0)
            if have is not None and have != start:
                out.append(
                    Violation(
                        "accounting.manager-agreement",
                        step,
                        f"scheduler has num_computed_tokens {start}, the KV manager {have}",
                        request_id=rid,
                        position=min(start, have),
                        expected=str(start),
                        found=str(have),
                    )
                )
        return out

    def roll_back(self, request_id: str, num_rejected: int) -> None:
        """The step's rejected drafts: the request's next chunk starts that much earlier."""
        assert num_rejected >= 0
        if num_rejected and request_id in self.next_start:
            self.next_start[request_id] -= num_rejected

    def forget(self, request_id: str) -> None:
        self.next_start.pop(request_id, None)


def _check_range(req, bad: Report) -> None:
    """range and drafts: the chunk runs at least one token, no further than the request's
    tokens plus its drafts, and never starts past the whole prompt (a full hit is capped)."""
    ncomp, nsched, end = req.num_computed_tokens, req.num_scheduled_tokens, req.num_end_tokens
    if ncomp < 0 or nsched < 1:
        bad("accounting.range", f"num_computed_tokens {ncomp}, num_scheduled_tokens {nsched}")
    ndraft = len(req.spec_token_ids)
    if end > req.num_tokens + ndraft:
        bad(
            "accounting.range",
            f"runs tokens up to {end}, the request has {req.num_tokens} (num_computed_tokens "
            f"{ncomp} + num_scheduled_tokens {nsched}) and {ndraft} drafts",
            position=req.num_tokens,
        )
    elif ndraft and end - ndraft != req.num_tokens:
        bad(
            "accounting.draft-position",
            f"its {ndraft} drafts end the chunk at {end}, but they must follow its "
            f"{req.num_tokens} known tokens (end {req.num_tokens + ndraft})",
            position=req.num_tokens,
        )
    if ncomp >= req.num_tokens:
        bad(
            "accounting.full-hit-cap",
            f"num_computed_tokens {ncomp} covers all {req.num_tokens} tokens: at least one "
            "must still be computed (vllm#7753)",
            position=ncomp,
        )


def _check_chunk(req, known: int | None, block_size: int, bad: Report) -> None:
    """chunk, knowledge and blocks: the chunk's token ids, the request's token count, and a
    block table long enough for every token up to the chunk's end."""
    nsched, end = req.num_scheduled_tokens, req.num_end_tokens
    if req.token_ids.size != nsched:
        bad(
            "accounting.chunk",
            f"chunk holds {req.token_ids.size} token ids for {nsched} scheduled tokens",
        )
    if known is not None and known != req.num_tokens:
        bad(
            "accounting.num-tokens",
            f"scheduled with num_tokens {req.num_tokens}, the request has {known} tokens",
            position=min(known, req.num_tokens),
            expected=str(known),
            found=str(req.num_tokens),
        )
    need = -(-end // block_size)
    if len(req.block_table) < need:
        bad(
            "accounting.block-table-short",
            f"block table holds {len(req.block_table)} blocks, tokens up to {end} need {need}",
            position=end - 1,
            expected=f">= {need} blocks",
            found=f"{len(req.block_table)} blocks",
        )


def _check_length(req, max_model_len: int, max_blocks: int, bad: Report) -> None:
    """max-model-len: positions below max_model_len, a table no wider than the runner's."""
    end, num_blocks = req.num_end_tokens, len(req.block_table)
    if end > max_model_len:
        bad(
            "accounting.max-model-len",
            f"runs positions up to {end - 1}, past max_model_len {max_model_len}",
            position=max_model_len,
            expected=f"<= {max_model_len}",
            found=str(end),
        )
    if num_blocks > max_blocks:
        bad(
            "accounting.max-model-len",
            f"block table holds {num_blocks} blocks, the runner's holds "
            f"cdiv(max_model_len {max_model_len}, block_size) = {max_blocks}",
            expected=f"<= {max_blocks} blocks",
            found=f"{num_blocks} blocks",
        )


def _decodes(req: ScheduledRequest) -> bool:
    """The request's chunk is a decode: its prompt is done before the step."""
    return req.num_computed_tokens >= req.num_prompt_tokens
