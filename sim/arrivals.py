"""Arrivals and aborts: SimPy processes that feed the engine loop's inbox.

Open-loop requests are released at `arrival_time_s`. A request with a predecessor
(`traces/sessions.py`: its parent turn, or the previous request of its closed-loop session)
is released `think_time_s` after the predecessor finished, and not before its
`arrival_time_s`; a later turn's full prompt is its parent's full prompt + the parent's
outputs + its own prompt. Aborts fire at `abort_time_s`.

A streaming-input client (`streams_chunks`, set where the engine queues chunks: vLLM's
streaming_queue) sends a later turn's own input at once when it arrives while its parent
runs; the engine continues the parent's session with it when the parent stops, keeping
every token but the parent's last sampled one. Such a turn (`queued`) is released at its
parent's finish, think time spent already, and its history leaves out that token::

    parent P:                  | P's full prompt ........ | o1 .. ok |
    C, sent while P runs:      | P's full prompt ........ | o1 .. o(k-1) | C's own |

Nothing here touches the engine: releases and aborts go into the inbox, which the engine
process drains at the next step boundary (as vLLM's engine core drains its input queue
between steps), in the order they happened.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import simpy

from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.sessions import PredecessorTracker
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE


@dataclass(frozen=True, slots=True)
class Release:
    request: TraceRequest
    prompt_token_ids: np.ndarray  # the full prompt (parent history included)


@dataclass(frozen=True, slots=True)
class Abort:
    request_id: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """A later turn's own input, sent while its parent runs (`Arrivals.streams_chunks`)."""

    request: TraceRequest
    token_ids: np.ndarray  # the turn's own prompt tokens


class Arrivals:
    """Releases the requests of a trace (streamed, in file order) into an inbox.

    Memory: the TraceRequest and outputs of each finished request are kept (not its
    materialized prompt), so a later turn can rebuild its history: a few KB per request
    (the outputs at 2 bytes a token where the ids fit: a whole trace keeps every one).
    """

    def __init__(
        self,
        env: simpy.Environment,
        requests: Iterable[TraceRequest],
        on_event: Callable[[], None],
        vocab_size: int = DEFAULT_VOCAB_SIZE,
    ) -> None:
        self.env = env
        self.inbox: deque[Release | Abort | Chunk] = deque()
        self.on_event = on_event
        self.vocab_size = vocab_size
        self.tracker = PredecessorTracker()
        self.waiting_on: dict[str, list[TraceRequest]] = {}  # predecessor id -> successors
        self.live: set[str] = set()  # released or waiting for a predecessor, not finished
        self.requests: dict[str, TraceRequest] = {}  # every request read so far
        # finished request id -> its outputs (uint16 where every id fits, else int32), or
        # the run result's outputs once shared (keep_outputs_in)
        self.outputs: Mapping[str, Sequence[int]] = {}
        self._own_outputs = True
        self.finished_at_s: dict[str, float] = {}
        self.num_timers = 0  # pending releases and aborts
        self.streaming = True
        self.released: list[TraceRequest] = []  # in release order (for bundles)
        self.streams_chunks = False  # a later turn's input is sent while its parent runs
        self.held_back: set[str] = set()  # live, not yet released (a predecessor, a think)
        self.chunk_sent: set[str] = set()  # parents whose later turn's chunk was sent
        self.queued: set[str] = set()  # later turns whose chunk the engine queued
        env.process(self._stream(iter(requests)))

    @property
    def idle(self) -> bool:
        """True when no release or abort is scheduled in time: only a finish can bring one
        (a successor waiting for its predecessor)."""
        return not self.streaming and self.num_timers == 0

    @property
    def done(self) -> bool:
        """True when nothing more will ever be released or aborted."""
        return not self.streaming and self.num_timers == 0 and not self.waiting_on

    def _stream(self, requests: Iterator[TraceRequest]):
        for request in requests:  # bounded by the trace
            delay_s = request.arrival_time_s - self.env.now
            if delay_s > 0:
                yield self.env.timeout(delay_s)
            self.requests[request.request_id] = request
            predecessor = self.tracker.predecessor_id(request)
            if predecessor in self.live:
                self.waiting_on.setdefault(predecessor, []).append(request)
                self.live.add(request.request_id)
                self.held_back.add(request.request_id)
                self._send_chunk(request, predecessor)
            elif predecessor in self.finished_at_s:
                self.live.add(request.request_id)
                self.held_back.add(request.request_id)
                self._release_after(request, self.finished_at_s[predecessor])
            else:
                self._release(request)
        self.streaming = False
        self.on_event()

    def keep_outputs_in(self, outputs: Mapping[str, Sequence[int]]) -> None:
        """Read a finished request's outputs from `outputs` (the run result's, which holds
        each one from the moment it is told `finished`) instead of keeping a copy: 0.8-3 KB
        a request seen, 10 MB over the Mooncake conversation trace."""
        assert not self.outputs, "before any request finished"
        self.outputs = outputs
        self._own_outputs = False

    def finished(self, request_id: str, output_token_ids: tuple[int, ...]) -> None:
        """A request finished (or was aborted or rejected): release what waited for it."""
        self.live.discard(request_id)
        if self._own_outputs:
            compact = _compact(np.asarray(output_token_ids, dtype=np.int32))
            self.outputs[request_id] = compact  # type: ignore[index]
        self.finished_at_s[request_id] = self.env.now
        self.chunk_sent.discard(request_id)
        for successor in self.waiting_on.pop(request_id, []):
            if successor.request_id in self.queued:  # continued already: released now,
                self._release(successor)  # before the engine schedules its session again
            else:
                self._release_after(successor, self.env.now)

    def accept_chunk(self, request_id: str) -> None:
        """The engine queued the chunk of later turn `request_id` in its parent's session."""
        self.queued.add(request_id)

    def _send_chunk(self, request: TraceRequest, predecessor: str) -> None:
        """A later turn arriving while its parent runs sends its own input at once, one
        that arrived before sends it as the parent is released (at most one later turn a
        parent)."""
        if not (
            self.streams_chunks
            and request.parent_request_id == predecessor
            and predecessor not in self.held_back
            and predecessor not in self.chunk_sent
        ):
            return
        self.chunk_sent.add(predecessor)
        self.inbox.append(Chunk(request, request.own_prompt_tokens(self.vocab_size)))
        self.on_event()

    def is_awaited(self, request_id: str) -> bool:
        """Does a later turn (or request of its session) already wait for this one?"""
        return request_id in self.waiting_on

    def full_prompt(self, request: TraceRequest) -> np.ndarray:
        """Parent's full prompt + parent's outputs + own prompt (bounded by the turn depth);
        a `queued` turn's history without its parent's last output."""
        parts = [request.own_prompt_tokens(self.vocab_size)]
        child_id, parent_id = request.request_id, request.parent_request_id
        for _ in range(len(self.requests)):  # bounded: a chain visits each request once
            if parent_id is None or parent_id not in self.outputs:
                break
            parent = self.requests[parent_id]
            outputs = np.asarray(self.outputs[parent_id], dtype=np.int64)
            parts.append(outputs[:-1] if child_id in self.queued else outputs)
            parts.append(parent.own_prompt_tokens(self.vocab_size))
            child_id, parent_id = parent_id, parent.parent_request_id
        prompt = parts[0] if len(parts) == 1 else np.concatenate(parts[::-1])
        prompt.flags.writeable = False
        return prompt

    def _release_after(self, request: TraceRequest, predecessor_finish_s: float) -> None:
        release_s = max(request.arrival_time_s, predecessor_finish_s + request.think_time_s)
        self._later(release_s, lambda: self._release(request))

    def _release(self, request: TraceRequest) -> None:
        self.live.add(request.request_id)
        self.held_back.discard(request.request_id)
        self.released.append(request)
        self.inbox.append(Release(request, self.full_prompt(request)))
        if request.abort_time_s is not None:
            self._later(request.abort_time_s, lambda: self._abort(request.request_id))
        for successor in self.waiting_on.get(request.request_id, ()):  # arrived while it
            self._send_chunk(successor, request.request_id)  # waited: sent as it starts
        self.on_event()

    def _abort(self, request_id: str) -> None:
        if request_id in self.live:
            self.inbox.append(Abort(request_id))

    def _later(self, when_s: float, action: Callable[[], None]) -> None:
        self.num_timers += 1

        def timer():
            delay_s = when_s - self.env.now
            if delay_s > 0:
                yield self.env.timeout(delay_s)
            self.num_timers -= 1
            action()
            self.on_event()

        self.env.process(timer())


def _compact(tokens: np.ndarray) -> np.ndarray:
    """The same ids in uint16 where every one fits (a vocabulary up to 65,536), else as is."""
    if tokens.size and int(tokens.min()) >= 0 and int(tokens.max()) <= 0xFFFF:
        return tokens.astype(np.uint16)
    return tokens
