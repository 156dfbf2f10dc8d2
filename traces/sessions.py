"""Closed-loop arrival: which earlier request a request waits for.

A request is released at `max(arrival_time_s, predecessor finish + think_time_s)`, where its
predecessor is

    parent_request_id                  if given (a later turn of a conversation: the full
                                       prompt is parent prompt + parent output + own prompt);
    else the previous request (in      if session_id is given (a closed-loop user, as in
    file order) with the same          Locust: the next request waits for the previous one
    session_id                         to finish, then thinks; prompts are independent);
    else none                          (open loop: released at arrival_time_s).

So a closed-loop user with no shared history is a run of lines with one `session_id`, no
`parent_request_id`, and `think_time_s` on every line after the first; its lines carry the
user's start time as `arrival_time_s` (a lower bound), which keeps arrivals non-decreasing.

    user u:  r0 ──finish── think ── r1 ──finish── think ── r2 ...
             ^ arrival_time_s = start of u for r0, r1, r2 (released by the rule above)
"""

from __future__ import annotations

from schedcheck.traces.schema import TraceRequest


class PredecessorTracker:
    """Fed the requests of a trace in file order, names each one's predecessor.

    Memory: one request id per session (a dict looked up by key, never iterated).
    """

    __slots__ = ("_last_by_session",)

    def __init__(self) -> None:
        self._last_by_session: dict[str, str] = {}

    def predecessor_id(self, request: TraceRequest) -> str | None:
        """The id `request` waits for (None: open loop); call once per request, in order."""
        predecessor = request.parent_request_id
        session = request.session_id
        if session is not None:
            if predecessor is None:
                predecessor = self._last_by_session.get(session)
            self._last_by_session[session] = request.request_id
        assert predecessor != request.request_id, "a request never waits for itself"
        return predecessor
