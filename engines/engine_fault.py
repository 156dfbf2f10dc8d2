"""An adapter's word that the engine under test broke its own contract.

An adapter reads the engine's state to build a `SchedulerOutput`; when what it reads
contradicts what the engine did (vLLM lists a request in `num_scheduled_tokens` that the
same `schedule()` call preempted, its counts diverge from the tokens it appended), the
engine is at fault, not the adapter. Raising `EngineFault` (never a bare assert, which
sim/blame.py blames on the adapter's own frame as a harness-crash) makes it a violation of
`invariant`, with the values in its message and a signature case of its own.
"""

from __future__ import annotations


class EngineFault(Exception):
    """The engine's state contradicts what the engine did: a finding about the engine."""

    def __init__(self, invariant: str, message: str, case: str, request_id: str = "") -> None:
        super().__init__(message)
        assert invariant and case, "an invariant and a case name the fault"
        self.invariant = invariant
        self.message = message
        self.case = case
        self.request_id = request_id
