"""The schedule timeline: what each request did at each step, from the schedule alone.

One mark per (request, step) where something happened to it::

    step        0        1        2       3          4        5  ...
    r0          prefill  prefill  decode  decode     decode   finished
    r1          hit+prefill       decode  preempted           resumed(prefill) ...

    prefill     a chunk of prompt (or of a resumed request's recompute): tokens
                [num_computed_tokens, num_computed_tokens + num_scheduled_tokens)
    decode      one token after all known tokens (num_computed_tokens = num_tokens - 1)
    cache hit   admitted (or re-admitted) with num_cached_tokens > 0 prefix-cache tokens
    preempted   in the step's preempted_req_ids: it lost its blocks
    resumed     its first scheduled step after a preemption
    finished    its last scheduled step, when it left with all its output tokens
    aborted     the step whose finished_req_ids report it gone short of its output
                length (an abort), or whose rejected_req_ids name it
Decodes are kept as runs of consecutive steps (first, last): a 3,000-step run stays small.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from schedcheck.engines.protocol import ScheduledRequest
from schedcheck.report.replay import StepView

KINDS = ("prefill", "decode", "cache hit", "preempted", "resumed", "aborted", "finished")


@dataclass(frozen=True)
class Mark:
    kind: str
    request_id: str
    step: int
    text: str  # what happened, in words (hover)
    last_step: int = -1  # decode runs: the last step of the run (else -1)


@dataclass
class Timeline:
    """Observer: the marks of every request; `request_ids` in first-scheduled order."""

    output_lengths: Mapping[str, int]  # request id -> its trace's output_length
    outputs: Mapping[str, list[int]]  # outputs.json
    marks: list[Mark] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    last_scheduled: dict[str, int] = field(default_factory=dict)
    decode_run: dict[str, tuple[int, int]] = field(default_factory=dict)  # open runs
    preempted: set[str] = field(default_factory=set)
    num_steps: int = 0
    first_step: int = 0  # the engine's numbering (vLLM v0 counts from 1)
    last_step: int = 0

    def observe(self, view: StepView) -> None:
        out = view.output
        if self.num_steps == 0:
            self.first_step = out.step
        self.num_steps += 1
        self.last_step = out.step
        for rid in out.finished_req_ids:
            self._close_run(rid)
            if self._short(rid):
                self._mark("aborted", rid, out.step, "reported finished short of its output length")
            elif rid in self.last_scheduled:
                step = self.last_scheduled[rid]
                self._mark("finished", rid, step, f"finished after step {step}")
        for rid, why in zip(out.rejected_req_ids, out.rejected_reasons or (), strict=False):
            self._mark("aborted", rid, out.step, f"rejected: {why}")
        for rid in out.preempted_req_ids:
            self._close_run(rid)
            self._mark("preempted", rid, out.step, "preempted: its blocks are freed")
            self.preempted.add(rid)
        for r in out.scheduled:
            self._scheduled(out.step, r)

    def finish(self) -> list[Mark]:
        """Close the open decode runs; the marks in (step, request) order."""
        for rid in list(self.decode_run):
            self._close_run(rid)
        return sorted(self.marks, key=lambda m: (m.step, m.request_id, KINDS.index(m.kind)))

    def _scheduled(self, step: int, r: ScheduledRequest) -> None:
        rid = r.request_id
        if rid not in self.request_ids:
            self.request_ids.append(rid)
        admitted = rid not in self.last_scheduled or rid in self.preempted
        if rid in self.preempted:
            self.preempted.discard(rid)
            self._mark(
                "resumed", rid, step, f"resumed at num_computed_tokens {r.num_computed_tokens}"
            )
        if admitted and r.num_cached_tokens > 0:
            self._mark(
                "cache hit", rid, step, f"{r.num_cached_tokens} tokens from the prefix cache"
            )
        self.last_scheduled[rid] = step
        if is_decode(r):
            first, _ = self.decode_run.get(rid, (step, step))
            self.decode_run[rid] = (first, step)
            return
        self._close_run(rid)
        self._mark("prefill", rid, step, chunk_text(r))

    def _close_run(self, rid: str) -> None:
        run = self.decode_run.pop(rid, None)
        if run is not None:
            first, last = run
            text = f"decode, steps {first}..{last}" if last > first else f"decode, step {first}"
            self.marks.append(Mark("decode", rid, first, text, last_step=last))

    def _mark(self, kind: str, rid: str, step: int, text: str) -> None:
        if rid not in self.last_scheduled and rid not in self.request_ids:
            self.request_ids.append(rid)  # rejected before it ever ran: a row all the same
        self.marks.append(Mark(kind, rid, step, text))

    def _short(self, rid: str) -> bool:
        want = self.output_lengths.get(rid)
        return want is not None and rid in self.outputs and len(self.outputs[rid]) < want


def is_decode(r: ScheduledRequest) -> bool:
    """One token after every known token, past the prompt."""
    return (
        r.num_scheduled_tokens == 1
        and r.num_computed_tokens == r.num_tokens - 1
        and r.num_computed_tokens >= r.num_prompt_tokens
    )


def chunk_text(r: ScheduledRequest) -> str:
    end = r.num_computed_tokens + r.num_scheduled_tokens
    cached = f", {r.num_cached_tokens} cached" if r.num_cached_tokens else ""
    table = list(r.block_table)
    shown = f"{table}" if len(table) <= 8 else f"[... {', '.join(map(str, table[-4:]))}]"
    return (
        f"prefill tokens [{r.num_computed_tokens}, {end}) of {r.num_tokens}{cached}; "
        f"block_table ({len(table)} blocks) {shown}"
    )
