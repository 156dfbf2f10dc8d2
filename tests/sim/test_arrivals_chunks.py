"""A streaming-input client's later turns (sim/arrivals.py, `streams_chunks`): a turn that
arrives while its parent runs sends its own input at once (a Chunk); where the engine
queued it, the turn is released the moment its parent finishes, with the history the
engine kept (the parent's outputs but the last), else as any later turn."""

import numpy as np
import simpy

from schedcheck.sim.arrivals import Arrivals, Chunk, Release
from schedcheck.traces.schema import TraceRequest

PARENT = TraceRequest("p", 0.0, 3, prompt_token_ids=(5, 6, 7))
CHILD = TraceRequest("c", 1.0, 2, prompt_token_ids=(11, 12), parent_request_id="p",
                     think_time_s=0.5)  # fmt: skip
GRANDCHILD = TraceRequest("g", 1.5, 1, prompt_token_ids=(13,), parent_request_id="c")


def _arrivals(trace, streams_chunks=True):
    env = simpy.Environment()
    arrivals = Arrivals(env, trace, lambda: None)
    arrivals.streams_chunks = streams_chunks
    return env, arrivals


def _drain(arrivals):
    items = list(arrivals.inbox)
    arrivals.inbox.clear()
    return [(type(i).__name__, i.request.request_id) for i in items], items


def test_a_turn_arriving_while_its_parent_runs_sends_its_own_input_at_once():
    env, arrivals = _arrivals([PARENT, CHILD])
    env.run(until=0.5)
    assert _drain(arrivals)[0] == [("Release", "p")]
    env.run(until=1.2)
    names, items = _drain(arrivals)
    assert names == [("Chunk", "c")]
    assert isinstance(items[0], Chunk) and items[0].token_ids.tolist() == [11, 12]


def test_a_queued_turn_is_released_at_its_parents_finish_without_its_last_output():
    env, arrivals = _arrivals([PARENT, CHILD])
    env.run(until=1.2)
    _drain(arrivals)
    arrivals.accept_chunk("c")
    env.run(until=2.0)
    arrivals.finished("p", (21, 22, 23))
    names, items = _drain(arrivals)  # at once: no think time, no timer
    assert names == [("Release", "c")]
    assert isinstance(items[0], Release)
    assert items[0].prompt_token_ids.tolist() == [5, 6, 7, 21, 22, 11, 12]


def test_a_chunk_the_engine_refused_leaves_the_turn_as_any_later_turn():
    env, arrivals = _arrivals([PARENT, CHILD])
    env.run(until=2.0)
    _drain(arrivals)
    arrivals.finished("p", (21, 22, 23))
    assert _drain(arrivals)[0] == []  # its think time first
    env.run(until=2.6)
    names, items = _drain(arrivals)
    assert names == [("Release", "c")]
    assert items[0].prompt_token_ids.tolist() == [5, 6, 7, 21, 22, 23, 11, 12]


def test_a_turn_whose_parent_waits_sends_its_input_as_the_parent_is_released():
    env, arrivals = _arrivals([PARENT, CHILD, GRANDCHILD])
    env.run(until=1.7)
    assert _drain(arrivals)[0] == [("Release", "p"), ("Chunk", "c")]  # g: c is not running
    arrivals.accept_chunk("c")
    arrivals.finished("p", (21, 22, 23))
    names, _ = _drain(arrivals)
    assert names == [("Release", "c"), ("Chunk", "g")]
    arrivals.accept_chunk("g")
    arrivals.finished("c", (31, 32))
    names, items = _drain(arrivals)
    assert names == [("Release", "g")]
    want = [5, 6, 7, 21, 22, 11, 12, 31, 13]  # each queued hop without its parent's last
    assert items[0].prompt_token_ids.tolist() == want


def test_one_chunk_a_parent_and_none_without_a_streaming_client():
    sibling = TraceRequest("s", 1.1, 1, prompt_token_ids=(14,), parent_request_id="p")
    env, arrivals = _arrivals([PARENT, CHILD, sibling])
    env.run(until=1.2)
    assert _drain(arrivals)[0] == [("Release", "p"), ("Chunk", "c")]
    env, arrivals = _arrivals([PARENT, CHILD], streams_chunks=False)
    env.run(until=1.2)
    assert _drain(arrivals)[0] == [("Release", "p")]
    assert not arrivals.queued and not arrivals.held_back - {"c"}


def test_a_chunk_leaves_no_state_behind_its_parent_and_the_release():
    env, arrivals = _arrivals([PARENT, CHILD])
    env.run(until=1.2)
    arrivals.accept_chunk("c")
    arrivals.finished("p", np.array([21, 22, 23]))
    assert arrivals.chunk_sent == set() and arrivals.held_back == set()
