"""engines/vllm/v1/sessions.py without vLLM: which turn runs a session, which sessions are
kept, the chunk a later turn sends; and the idle check's tables held between turns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.engines.vllm.v1.sessions import Sessions, streaming_input
from schedcheck.invariants.block_pool import check_no_leak


@dataclass
class FakeSession:
    """What Sessions reads of vLLM's Request."""

    request_id: str
    all_token_ids: list[int] = field(default_factory=list)
    cache_salt: str | None = None
    finished: bool = False

    def is_finished(self) -> bool:
        return self.finished

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)


def later_turn(rid: str, parent: str, prompt: list[int], salt: str | None = None) -> EngineRequest:
    tokens = np.asarray(prompt, np.int64)
    tokens.flags.writeable = False
    return EngineRequest(rid, tokens, 2, cache_salt=salt, parent_request_id=parent)


def continue_(sessions: Sessions, request: EngineRequest):
    """As the adapter does: the session kept for `request`, and the chunk it sends it (None
    where it cannot continue it); None where no session was kept."""
    session = sessions.take(request)
    return None if session is None else (session, sessions.resume(request, session))


def test_the_option_is_read_from_extra():
    assert streaming_input(EngineConfig(extra={"streaming_input": "true"})) == "true"
    assert streaming_input(EngineConfig(extra={"streaming_input": "queued"})) == "queued"
    assert streaming_input(EngineConfig()) is None
    with pytest.raises(AssertionError, match="streaming_input='yes'"):
        streaming_input(EngineConfig(extra={"streaming_input": "yes"}))
    assert (Sessions("true").queues_chunks, Sessions("queued").queues_chunks) == (False, True)


def test_a_session_continued_with_a_queued_chunk_is_kept_then_run_by_the_later_turn():
    sessions = Sessions("queued")
    sessions.queue("r0", "r1")
    # vLLM continued r0's session at its stop: prompt 10..12, outputs 70 (71 dropped), chunk
    s = FakeSession("r0", [10, 11, 12, 70, 30, 31])
    assert sessions.stopped("r0", s)
    assert (sessions.kept, sessions.queued, sessions.num_queued) == ({"r0": s}, {}, 1)
    assert sessions.continued(later_turn("rx", "r0", [1])) is None  # not the queued turn
    assert sessions.continued(later_turn("r1", "r0", [10, 11, 12, 70, 30, 31])) is s
    assert (sessions.kept, sessions.turn_id("r0"), sessions.session_id("r1")) == ({}, "r1", "r0")
    assert sessions.num_resumed == 1


def test_a_queued_chunk_goes_with_a_session_that_ended_and_a_turn_without_one_is_not_kept():
    sessions = Sessions("queued")
    sessions.queue("r0", "r1")
    assert not sessions.stopped("r0", FakeSession("r0", [10, 70], finished=True))  # aborted
    assert sessions.kept == {} and sessions.queued == {}
    assert not sessions.stopped("r5", FakeSession("r5", [10, 70]))  # nothing queued
    with pytest.raises(AssertionError, match="a chunk queued already"):
        sessions.queue("r2", "r3") or sessions.queue("r2", "r4")


def test_a_session_continued_with_other_tokens_than_the_turns_prompt_is_the_harness_bug():
    sessions = Sessions("queued")
    sessions.queue("r0", "r1")
    sessions.stopped("r0", FakeSession("r0", [10, 70, 30]))
    with pytest.raises(AssertionError, match="continued with other tokens"):
        sessions.continued(later_turn("r1", "r0", [10, 70, 71, 30]))


def test_a_kept_session_is_continued_by_the_later_turn_with_its_last_output_first():
    sessions = Sessions("true")
    s = FakeSession("r0", [10, 11, 12, 70, 71])  # prompt 10..12, outputs 70, 71
    assert sessions.keep("r0", s, lambda: True)
    assert sessions.kept == {"r0": s}
    session, chunk = continue_(sessions, later_turn("r1", "r0", [10, 11, 12, 70, 71, 30, 31]))
    assert (session, chunk) == (s, [71, 30, 31])  # vLLM keeps 4 tokens, drops 71
    assert (sessions.turn_id("r0"), sessions.session_id("r1"), sessions.kept) == ("r1", "r0", {})
    assert (sessions.turn_id("x"), sessions.session_id("x"), sessions.num_resumed) == ("x", "x", 1)


def test_a_session_is_named_by_its_latest_turn_until_vllm_frees_it():
    sessions = Sessions("true")
    s = FakeSession("r0", [10, 70])
    sessions.keep("r0", s, lambda: True)
    continue_(sessions, later_turn("r1", "r0", [10, 70, 30]))
    s.all_token_ids = [10, 70, 30, 80]
    sessions.keep("r1", s, lambda: True)
    continue_(sessions, later_turn("r2", "r1", [10, 70, 30, 80, 40]))
    assert (sessions.turn_id("r0"), sessions.session_id("r2"), sessions.session_id("r1")) == (
        "r2",
        "r0",
        "r1",
    )
    sessions.forget({"r0"})
    assert (sessions.turn_id("r0"), sessions.session_id("r2"), sessions.renamed) == ("r0", "r2", {})


def test_a_turn_no_later_turn_waits_for_is_not_kept():
    sessions = Sessions("true")
    s = FakeSession("r0", [10, 70])
    assert not sessions.keep("r0", s, lambda: False)
    assert not sessions.keep("r0", s, None)
    assert sessions.kept == {}
    assert continue_(sessions, later_turn("r1", "r0", [10, 70, 30])) is None  # its own request


def test_a_later_turn_of_another_cache_salt_does_not_continue_the_session():
    """A session keeps its first request's salt (a streaming update carries none): the
    later turn is a request of its own, the session handed back to be closed."""
    sessions = Sessions("true")
    s = FakeSession("r0", [10, 70], cache_salt="a")
    sessions.keep("r0", s, lambda: True)
    assert continue_(sessions, later_turn("r1", "r0", [10, 70, 30], salt=None)) == (s, None)
    assert (sessions.kept, sessions.num_resumed, sessions.turn_id("r0")) == ({}, 0, "r0")


def test_a_later_turn_whose_prompt_is_not_the_sessions_tokens_is_refused():
    sessions = Sessions("true")
    sessions.keep("r0", FakeSession("r0", [10, 11, 70]), lambda: True)
    with pytest.raises(AssertionError, match="does not start with session r0's 2 kept tokens"):
        continue_(sessions, later_turn("r1", "r0", [10, 12, 70, 30]))


class FakeSnapshot:
    """A pool of 6 blocks (block 0 reserved): r0's kept session holds 1 and 2, block 3 is
    held twice (r0's and a request that should be gone)."""

    reserved_block_ids = (0,)

    def __init__(self, held: tuple[str, ...]) -> None:
        self._held = held

    def ref_cnt(self) -> np.ndarray:
        return np.array([1, 1, 1, 2, 0, 0], np.int64)

    def block_tables(self):
        return {"r0": [1, 2, 3], "gone": [3]}

    def held_between_turns(self) -> tuple[str, ...]:
        return self._held


def test_the_idle_check_leaves_out_what_a_kept_session_holds_once():
    kept = check_no_leak(7, FakeSnapshot(("r0",)))
    assert [(v.invariant, v.block) for v in kept] == [("block-pool.leak", 3)]
    assert "block 3 still has ref_cnt 1" in kept[0].message
    none_kept = check_no_leak(7, FakeSnapshot(()))
    assert [(v.block, v.message.split(", ")[1]) for v in none_kept] == [
        (1, "block 1 still has ref_cnt 1")
    ]


def test_the_frontend_sees_a_continuing_turns_chunk_not_its_whole_prompt():
    sessions = Sessions("true")
    sessions.keep("r0", FakeSession("r0", [1, 2, 3, 4, 9]), lambda: True)  # keeps 1 2 3 4
    turn = later_turn("r1", "r0", [1, 2, 3, 4, 9, 5, 6])
    assert sessions.num_chunk_tokens(turn) == 3  # 9 5 6: what vLLM's frontend validates
    assert sessions.num_chunk_tokens(later_turn("r1", "r0", [1, 2, 3, 4, 9, 5], "s")) == 6
    assert sessions.num_chunk_tokens(later_turn("r2", "rx", [7, 8])) == 2  # nothing kept
    assert "r0" in sessions.kept  # a peek: the session stays kept for the turn
