"""vLLM's resumable (streaming-input) sessions, driven by the simulator's later turns.

A streaming-input client (vLLM 0.34's `AsyncLLM.generate` with an input stream) sends each
input chunk as a `Request(resumable=True)` under the session's one request id. When a turn
stops, vLLM keeps the request and its KV blocks (WAITING_FOR_STREAMING_REQ); the next
chunk continues it (`Scheduler._update_request_as_session`: every token but the last one
sampled, then the chunk); the stream's end, a request that is not resumable, aborts the
session and frees its blocks.

The simulator's later turns (a trace's `parent_request_id`) map onto this unchanged. With
the option on (EngineConfig.extra "streaming_input" "true"), every request is resumable; a
turn whose finish a later turn waits for (`EngineRequest.continues()`) is kept, any other
is closed at once. The later turn continues its parent's session with its prompt past the
tokens vLLM keeps, its parent's last output first, so the session's tokens are its prompt:

    parent P (session s):  | P's prompt ............. | P's outputs o1 .. ok |
    vLLM keeps:            | P's prompt ............. | o1 .. o(k-1) |
    later turn C's prompt: | P's prompt ............. | o1 .. ok | C's own |
    the chunk sent to s:                                  | ok | C's own |

vLLM names the session by its first request's id (s), the simulator each turn by its own
(C): `turn_id` and `session_id` translate, for sessions only (identity for the rest).

With "queued" (STREAMING_INPUT_KEY), the client also sends a later turn's own input as soon
as it arrives while its parent runs (`queue`): vLLM keeps it in the session's
streaming_queue and continues the session with it inside the update where the parent stops
(every token but the last sampled, then the chunk). The simulator then adds the turn with
that history (sim/arrivals.py), and the session, already running it, is `continued`:

    parent P (session s):     | P's prompt ............. | o1 .. ok |
    chunk sent while P runs:                                        | C's own |
    vLLM continues s with:    | P's prompt ............. | o1 .. o(k-1) | C's own |
    later turn C's prompt:    | P's prompt ............. | o1 .. o(k-1) | C's own |
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from schedcheck.engines.protocol import EngineConfig, EngineRequest

STREAMING_INPUT_KEY = "streaming_input"  # EngineConfig.extra: "true" drives sessions
QUEUED = "queued"  # ... and sends a later turn's input while its parent runs
STREAMING_INPUT_MODES = ("true", QUEUED)


def streaming_input(config: EngineConfig) -> str | None:
    """The streaming-input mode the config drives ("true", "queued"), or None."""
    mode = config.extra.get(STREAMING_INPUT_KEY, "false")
    assert mode in (*STREAMING_INPUT_MODES, "false"), f"{STREAMING_INPUT_KEY}={mode!r}"
    return None if mode == "false" else mode


@functools.cache
def has_streaming_input() -> bool:
    """The installed vLLM's requests may be resumable sessions (0.34.0 on). Imports vLLM."""
    from vllm.v1.request import Request

    return "resumable" in inspect.signature(Request.__init__).parameters


class Sessions:
    """Which of vLLM's requests are sessions, which turn runs each, which are kept."""

    def __init__(self, mode: str | None) -> None:
        self.enabled = mode is not None  # every request is resumable
        self.queues_chunks = mode == QUEUED  # a later turn's input is sent while its parent runs
        self.queued: dict[str, str] = {}  # parent turn -> the later turn whose chunk vLLM queued
        self._continued: dict[str, Any] = {}  # later turn -> the session vLLM continued with it
        self.num_queued = 0  # chunks queued while their parent ran
        self._turn_of: dict[str, str] = {}  # vLLM session id -> its turn's id, where they differ
        self._session_of: dict[str, str] = {}  # the reverse
        # the id of a turn that ended, kept for the later turn that waits -> vLLM's request
        self.kept: dict[str, Any] = {}
        self.num_resumed = 0  # later turns that continued a kept session

    def turn_id(self, vllm_id: str) -> str:
        return self._turn_of.get(vllm_id, vllm_id)

    def session_id(self, turn_id: str) -> str:
        return self._session_of.get(turn_id, turn_id)

    @property
    def renamed(self) -> dict[str, str]:
        """vLLM session id -> the id of its turn, where they differ (read-only use)."""
        return self._turn_of

    def keep(self, turn_id: str, session: Any, continues: Callable[[], bool] | None) -> bool:
        """The turn `turn_id` of `session` stopped: keep the session for the later turn that
        waits for it (True), or not (the caller closes it)."""
        if continues is None or not continues():
            return False
        self.kept[turn_id] = session
        return True

    def num_chunk_tokens(self, request: EngineRequest) -> int:
        """The tokens `request` would send: its chunk where it continues a kept session
        (vLLM's frontend validates only that: a session may grow past max_model_len), else
        its whole prompt."""
        session = self.kept.get(request.parent_request_id or "")
        if session is None or request.cache_salt != session.cache_salt:
            return request.num_prompt_tokens
        return request.num_prompt_tokens - _num_kept_tokens(session)

    def queue(self, parent_turn: str, turn: str) -> None:
        """vLLM queued later turn `turn`'s chunk in the session running `parent_turn`."""
        assert parent_turn not in self.queued, f"{parent_turn}: a chunk queued already"
        self.queued[parent_turn] = turn
        self.num_queued += 1

    def stopped(self, parent_turn: str, session: Any) -> bool:
        """Turn `parent_turn` of `session` ended: where vLLM continued the session with a
        queued chunk (the stop took it: the session is not finished), the session is kept
        for that later turn (True); a chunk queued in a session that ended went with it."""
        turn = self.queued.pop(parent_turn, None)
        if turn is None or session.is_finished():
            return False
        self.kept[parent_turn] = session
        self._continued[turn] = session
        return True

    def continued(self, request: EngineRequest) -> Any | None:
        """The session vLLM continued with `request`'s queued chunk, now named by `request`
        (its tokens are the request's prompt), no longer kept; None if none."""
        session = self._continued.pop(request.request_id, None)
        if session is None:
            return None
        assert self.kept.pop(request.parent_request_id or "", None) is session
        tokens, prompt = session.all_token_ids, request.prompt_token_ids
        assert len(tokens) == prompt.size and list(tokens) == prompt.tolist(), (
            f"{request.request_id}: session {session.request_id} continued with other tokens"
        )
        self._rename(session.request_id, request.request_id)
        self.num_resumed += 1
        return session

    def take(self, request: EngineRequest) -> Any | None:
        """The session kept for `request` (its parent's), no longer kept; None if none."""
        parent = request.parent_request_id
        return None if parent is None else self.kept.pop(parent, None)

    def resume(self, request: EngineRequest, session: Any) -> list[int] | None:
        """`request` continues `session` (taken for it): the chunk to send it, now named
        by `request`; None where it cannot continue it (another cache_salt: a session keeps
        its first request's, so the caller closes it and adds the request anew)."""
        if request.cache_salt != session.cache_salt:
            return None
        keep_end = _num_kept_tokens(session)
        prompt = request.prompt_token_ids
        kept = list(session.all_token_ids[:keep_end])
        assert prompt.size > keep_end and prompt[:keep_end].tolist() == kept, (
            f"{request.request_id}: its prompt does not start with session "
            f"{session.request_id}'s {keep_end} kept tokens"
        )
        self._rename(session.request_id, request.request_id)
        self.num_resumed += 1
        return prompt[keep_end:].tolist()

    def _rename(self, session_id: str, turn_id: str) -> None:
        """Session `session_id` now runs turn `turn_id`."""
        self._unname(session_id)
        if turn_id != session_id:
            self._turn_of[session_id] = turn_id
            self._session_of[turn_id] = session_id

    def forget(self, vllm_ids: Any) -> None:
        """vLLM freed these requests (its finished_req_ids, named by turn before this)."""
        if self._turn_of:
            for vllm_id in vllm_ids:  # bounded: the step's finished requests
                self._unname(vllm_id)

    def _unname(self, session_id: str) -> None:
        turn = self._turn_of.pop(session_id, None)
        if turn is not None:
            self._session_of.pop(turn, None)


def _num_kept_tokens(session: Any) -> int:
    """The tokens vLLM keeps of a stopped turn: every one but the last sampled."""
    return session.num_tokens - 1
