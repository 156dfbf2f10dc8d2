"""The KV story of one block: every write, owner change, content and state, to the bad read.

Lanes (one row each in the report's lane chart; one line per event in its table)::

    step    0          2            5                 6
    state   in use ....... cached ........ in use (evicted) ...
    engine  (kv_events.jsonl) ref_cnt 0; in the prefix cache as #9f3e...
    owners  r0 (1)                        r1 (1), cache hit
    content r0 pos 0..3 #1f2e...          r1 pos 4..7 #77a0...
    writes  r0 pos 0 slot 4 ...           r1 pos 4 slot 4
    read                                           r1 key 4 slot 4: holds r0's KV  <- the bad read

owners: live requests whose block table holds the block (ref_cnt = their count); content:
who wrote each slot (the shadow KV's writer) and the hash-model identity of its last slot
when the block is full (what a prefix cache hashes it by); state: in use / cached / free
(`blocks.py`), `evicted` when a cached block's content is overwritten by a new owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.report.replay import StepView
from schedcheck.sim.symbolic import SymbolicExecutor

LANES = ("read", "writes", "content", "engine", "owners", "state")


@dataclass(frozen=True)
class StoryEvent:
    step: int
    lane: str  # one of LANES
    text: str
    request_id: str = ""
    ref_cnt: int = 0
    state: str = ""
    content: str = ""


@dataclass(frozen=True)
class BadRead:
    step: int
    request_id: str
    position: int
    slot: int
    text: str


@dataclass
class BlockStory:
    """Observer of one block up to (and including) `last_step`."""

    block: int
    last_step: int
    bad_read: BadRead | None = None
    events: list[StoryEvent] = field(default_factory=list)
    states: list[tuple[int, str]] = field(default_factory=list)  # (step, state) every step
    holders: tuple[str, ...] = ()
    content: str = "empty"
    state: str = "free"
    engine: Mapping[int, str] = field(default_factory=dict)  # step -> the engine's view

    def observe(self, view: StepView) -> None:
        step = view.output.step
        if step > self.last_step:
            return
        ref_cnt = int(view.blocks.ref_cnt[self.block])
        self._owners(view, step, ref_cnt)
        self._writes(view, step, ref_cnt)
        content = describe_block(view.shadow, self.block)
        state = view.blocks.state_of(self.block)
        evicted = self.state == "cached" and content != self.content
        if content != self.content:
            self._event(step, "content", content, ref_cnt=ref_cnt, state=state, content=content)
        if state != self.state or evicted:
            text = f"{state} (evicted: its cached content overwritten)" if evicted else state
            self._event(step, "state", text, ref_cnt=ref_cnt, state=state, content=content)
        self.content, self.state = content, state
        self.states.append((step, state))
        if step in self.engine:
            self._event(step, "engine", self.engine[step], ref_cnt=ref_cnt, state=state)
        if self.bad_read is not None and step == self.bad_read.step:
            r = self.bad_read
            self._event(step, "read", r.text, r.request_id, ref_cnt, state, content)

    def _owners(self, view: StepView, step: int, ref_cnt: int) -> None:
        scheduled = {r.request_id: r for r in view.output.scheduled}
        candidates = set(self.holders) | {
            rid for rid, r in scheduled.items() if self.block in r.block_table
        }
        holders = tuple(sorted(r for r in candidates if self.block in view.tables.get(r, ())))
        if holders == self.holders:
            return
        notes = []
        for rid in holders:
            r = scheduled.get(rid)
            if rid not in self.holders and r is not None:
                index = r.block_table.index(self.block)
                hit = index * view.blocks.block_size < r.num_cached_tokens  # partly, too
                notes.append(
                    f"{rid} takes it as logical block {index}{' (cache hit)' if hit else ''}"
                )
        notes += [f"{rid} lets it go" for rid in self.holders if rid not in holders]
        text = f"held by {', '.join(holders) or 'nobody'} (ref_cnt {ref_cnt}): " + "; ".join(notes)
        self._event(step, "owners", text, ", ".join(holders), ref_cnt, "", "")
        self.holders = holders

    def _writes(self, view: StepView, step: int, ref_cnt: int) -> None:
        meta, shadow, bs = view.meta, view.shadow, view.blocks.block_size
        for src, dst in view.output.block_copies:
            if dst == self.block:
                self._event(
                    step, "writes", f"copy-on-write: block {src} copied here", ref_cnt=ref_cnt
                )
        rows = np.flatnonzero(meta.slot_mapping // bs == self.block)
        runs = _runs(meta.row_req[rows], meta.positions[rows], meta.slot_mapping[rows])
        for first, last in runs:  # one event per run of a request's positions and slots
            rid = meta.req_ids[int(meta.row_req[rows[first]])]
            wrong = [
                int(meta.positions[r])
                for r in rows[first : last + 1]
                if not _right(shadow, rid, meta, r)
            ]
            how = f" (positions {wrong} computed from a wrong token)" if wrong else ""
            text = f"{rid} writes {_span(meta, rows[first], rows[last])}{how}"
            self._event(step, "writes", text, rid, ref_cnt)
        drafts = np.flatnonzero(meta.lookahead_slot_mapping // bs == self.block)
        for w in drafts.tolist():
            rid = meta.req_ids[int(meta.lookahead_req[w])]
            pos, slot = int(meta.lookahead_positions[w]), int(meta.lookahead_slot_mapping[w])
            text = f"{rid}'s drafter writes draft position {pos} into slot {slot}"
            self._event(step, "writes", text, rid, ref_cnt)

    def _event(
        self,
        step: int,
        lane: str,
        text: str,
        request_id: str = "",
        ref_cnt: int = 0,
        state: str = "",
        content: str = "",
    ) -> None:
        self.events.append(StoryEvent(step, lane, text, request_id, ref_cnt, state, content))


def _runs(row_reqs: np.ndarray, positions: np.ndarray, slots: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) indices of runs of one request's consecutive positions and slots."""
    runs: list[tuple[int, int]] = []
    for i in range(len(row_reqs)):
        same = runs and row_reqs[i] == row_reqs[i - 1]
        if same and positions[i] == positions[i - 1] + 1 and slots[i] == slots[i - 1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _span(meta: RunnerMetadata, first_row: int, last_row: int) -> str:
    p0, p1 = int(meta.positions[first_row]), int(meta.positions[last_row])
    s0, s1 = int(meta.slot_mapping[first_row]), int(meta.slot_mapping[last_row])
    if first_row == last_row:
        return f"position {p0} into slot {s0}"
    return f"positions {p0}..{p1} into slots {s0}..{s1}"


def _right(shadow: SymbolicExecutor, rid: str, meta: RunnerMetadata, row: int) -> bool:
    """Row `row` wrote the request's true KV entry for its position."""
    req = shadow.requests.get(rid)
    pos, slot = int(meta.positions[row]), int(meta.slot_mapping[row])
    return req is not None and pos < req.num_tokens and bool(req.ids[pos] == shadow.shadow[slot])


def describe_block(shadow: SymbolicExecutor, block: int) -> str:
    """Who wrote each slot ("r0 pos 4..7"), and the identity of a full block ("#1f2e3d4c")."""
    bs = shadow.block_size
    slots = np.arange(block * bs, (block + 1) * bs)
    written = shadow.shadow[slots] != 0
    if not written.any():
        return "empty"
    runs: list[list[int]] = []  # [writer, first pos, last pos]
    for slot in slots[written].tolist():
        who, pos = int(shadow.writer_req[slot]), int(shadow.writer_pos[slot])
        if runs and runs[-1][0] == who and runs[-1][2] == pos - 1:
            runs[-1][2] = pos
        else:
            runs.append([who, pos, pos])
    names = shadow.req_names
    parts = [
        f"{names[w] if w >= 0 else '?'} pos {a}" + (f"..{b}" if b > a else "") for w, a, b in runs
    ]
    tail = (
        f" #{int(shadow.shadow[slots[-1]]):016x}"[:10]
        if written.all()
        else (f" ({int(written.sum())}/{bs} slots written)")
    )
    return ", ".join(parts) + tail
