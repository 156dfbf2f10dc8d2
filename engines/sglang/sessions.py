"""SGLang 0.5.23's streaming sessions, driven by the simulator's later turns.

A streaming session (`OpenSessionReqInput(streaming=True)`) keeps its KV between turns: the
first turn's row allocation hands its KV record (req_to_token row, lengths) and its tree
lock to the session (`StreamingSession.take`), every later turn borrows that record and
matches its prefix against it (`try_match_prefix`: the committed length, the tail past it
freed), and a turn that finishes trims its record to prompt + outputs and leaves it with
the session (`try_cache_finished_req`); an aborted turn takes the record back and frees it.
A request joins a session through `Session.create_req`, which builds its prompt: the last
finished turn's prompt + outputs + the new input.

The simulator's later turns (a trace's `parent_request_id`) map onto this unchanged. With
the option on (EngineConfig.extra "streaming_session" "true"), every request opens a
session (named by its SGLang rid); a turn whose finish a later turn waits for
(`EngineRequest.continues()`) keeps it, any other closes it (`Scheduler.close_session`).
The later turn sends its prompt past its parent's prompt + outputs, so the session builds
exactly the later turn's prompt (asserted)::

    parent P (session s):   | P's prompt ........... | P's outputs |
    later turn C's prompt:  | P's prompt ........... | P's outputs | C's own |
    C's input to s:                                               | C's own |

A session whose turn was aborted, or whose later turn is salted otherwise (the session's
KV keeps its first turn's salt), is closed, and the later turn opens its own.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from typing import Any

from schedcheck.engines.protocol import EngineRequest

from sglang.srt.managers.io_struct import CloseSessionReqInput, OpenSessionReqInput  # isort: skip
from sglang.srt.managers.io_struct import SessionParams, TokenizedGenerateReqInput  # isort: skip
from sglang.srt.managers.schedule_batch import Req  # isort: skip

CAPACITY_OF_STR_LEN = 1 << 30  # the session's text capacity (no text here)


class SglangSessions:
    """Which SGLang session runs each turn, which are kept for a later turn."""

    def __init__(self, scheduler: Any, enabled: bool) -> None:
        self.scheduler = scheduler
        self.enabled = enabled
        self._session_of: dict[str, str] = {}  # live turn -> its session id
        self.kept: dict[str, str] = {}  # finished turn -> its session, kept for a later turn
        self.num_resumed = 0  # later turns that continued a kept session
        self._num_reaps = 0  # maybe_reap's clock: one tick a call, so every call reaps

    def create_req(self, request: EngineRequest, sgl_rid: str, params: Any, vocab_size: int) -> Req:
        """SGLang's Req for `request` (SGLang rid `sgl_rid`), made by its session: the kept
        session of its parent, where it continues it, else a session opened for it."""
        session_id, new_tokens = self._continue(request)
        if session_id is None:
            session_id = f"s{sgl_rid}"
            opened = self.scheduler.session_controller.open(
                OpenSessionReqInput(
                    capacity_of_str_len=CAPACITY_OF_STR_LEN, session_id=session_id, streaming=True
                )
            )
            assert opened.success, f"{request.request_id}: session {session_id} not opened"
            new_tokens = request.prompt_token_ids.tolist()
        recv = TokenizedGenerateReqInput(
            rid=sgl_rid, input_text="", input_ids=array("q", new_tokens), input_embeds=None,
            mm_inputs=None, token_type_ids=None, sampling_params=params, return_logprob=False,
            logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False,
            session_params=SessionParams(id=session_id), cache_salt=request.cache_salt,
        )  # fmt: skip
        session = self.scheduler.session_controller.get(session_id)
        req = session.create_req(recv, None, vocab_size)  # SGLang's Req, built by the session
        assert req.to_finish is None and req.finished_reason is None, (
            f"{request.request_id}: session {session_id} refused it ({req.finished_reason})"
        )
        assert list(req.origin_input_ids) == request.prompt_token_ids.tolist(), (
            f"{request.request_id}: session {session_id} built another prompt"
        )
        self._session_of[request.request_id] = session_id
        return req

    def _continue(self, request: EngineRequest) -> tuple[str | None, list[int]]:
        """(the session `request` continues, its input to it), or (None, []) where none:
        no kept session, or one it cannot continue (closed here)."""
        session_id = self.kept.pop(request.parent_request_id or "", None)
        if session_id is None:
            return None, []
        session = self.scheduler.session_controller.get(session_id)
        [node] = session.req_nodes.values()
        last = node.req
        history = [*last.origin_input_ids, *last.output_ids[: last.sampling_params.max_new_tokens]]
        prompt = request.prompt_token_ids
        if last.cache_salt != request.cache_salt or prompt[: len(history)].tolist() != history:
            self._close(session_id)
            return None, []
        self.num_resumed += 1
        return session_id, prompt[len(history) :].tolist()

    def finished(self, turn_id: str, reason: str, continues: Callable[[], bool] | None) -> None:
        """Turn `turn_id` finished (`reason`): its session is kept for the later turn that
        waits for it, or closed (an aborted turn's always: SGLang keeps its last finished
        turn's history, not the aborted one's)."""
        session_id = self._session_of.pop(turn_id, None)
        if session_id is None:
            return
        if reason != "abort" and continues is not None and continues():
            self.kept[turn_id] = session_id
        else:
            self._close(session_id)

    def rejected(self, request: EngineRequest) -> None:
        """`request` was refused before SGLang queued it: the session it continued, or
        the one opened for it, is closed (its turn ended before it began)."""
        session_id = self._session_of.pop(request.request_id, None)
        if session_id is not None:
            self.scheduler.session_controller.get(session_id).abort_req()
        else:
            session_id = self.kept.pop(request.parent_request_id or "", None)
        if session_id is not None:
            self._close(session_id)

    def _close(self, session_id: str) -> None:
        """Close the session as its client would (SGLang defers it past a turn in flight)."""
        self.scheduler.close_session(CloseSessionReqInput(session_id=session_id))

    def reap(self) -> None:
        """SGLang's event loop step: deferred closes whose turn has finished are done."""
        if not self.enabled:
            return
        self._num_reaps += 1
        self.scheduler.session_controller.maybe_reap(float(self._num_reaps), interval=0.0)

    def held_rows(self, live: Mapping[str, Any]) -> list[Any]:
        """The KV records sessions hold between turns (not borrowed by a turn of `live`,
        our id -> SGLang Req): their slots are SGLang's own, as the tree's are."""
        if not self.enabled:
            return []
        borrowed = {id(req.kv) for req in live.values()}
        records = self.scheduler.tree_cache.session_records().values()
        return [kv for kv in records if kv.holds_kv and id(kv) not in borrowed]
