"""Rare paths of SGLang's own code the adapter counts (its `rare_path_counts()`, read by
sim/coverage.py as ENGINE_PATHS): a campaign that never reaches one has not run that code.

    retract-with-token-in-flight   overlap scheduling: a request retracted while a batch in
                                   flight samples its token (the output's dropped_req_ids)
    mixed-chunk-step               --enable-mixed-chunk: a prefill batch ran with the
                                   running decodes in one forward (ForwardMode.MIXED,
                                   ScheduleBatch.mix_with_running)
    session-resumed                streaming sessions: a later turn continued its parent's
                                   session, its KV kept between turns (sessions.py)
"""

from __future__ import annotations

from typing import Any

RETRACT_WITH_TOKEN_IN_FLIGHT = "retract-with-token-in-flight"
MIXED_CHUNK_STEP = "mixed-chunk-step"
SESSION_RESUMED = "session-resumed"


class RarePaths:
    def __init__(self, sessions: Any = None) -> None:
        self.num_dropped = 0
        self.num_mixed = 0
        self.sessions = sessions  # sessions.SglangSessions, counted where enabled

    def observe(self, batch: Any, num_dropped: int) -> None:
        """One schedule(): its batch (None: none) and the requests it dropped."""
        self.num_dropped += num_dropped
        if batch is not None and batch.forward_mode.is_mixed():
            self.num_mixed += 1

    def counts(self) -> dict[str, int]:
        counts = {RETRACT_WITH_TOKEN_IN_FLIGHT: self.num_dropped, MIXED_CHUNK_STEP: self.num_mixed}
        if self.sessions is not None and self.sessions.enabled:
            counts[SESSION_RESUMED] = self.sessions.num_resumed
        return counts
