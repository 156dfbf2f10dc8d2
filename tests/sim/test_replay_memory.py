"""What a long replay keeps (issue 30): a request waiting in the engine's queue costs the
shadow KV no buffers and the ledger no prompt, outputs are kept packed, and the pool
check's hash memory forgets its oldest hash first (gather_slots, now array operations, is
checked against a position-by-position oracle in test_slots.py)."""

import numpy as np

from schedcheck.engines.protocol import EngineConfig
from schedcheck.invariants import block_pool, hash_model
from schedcheck.sim.arrivals import Release
from schedcheck.sim.cost_model import profile
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.result import Outputs, RunResult, SimOptions
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.traces.schema import TraceRequest


def test_a_waiting_request_costs_the_shadow_kv_no_buffers_until_it_is_read():
    shadow = SymbolicExecutor(num_blocks=8, block_size=4)
    prompt = np.arange(10, 20, dtype=np.int64)
    prompt.flags.writeable = False
    shadow.add_request("r0", prompt)
    req = shadow.requests["r0"]
    assert req.buffers is None and req.prompt is prompt  # no copy of a read-only prompt
    assert shadow.identity_at("r0", 9) == int(hash_model.identities(prompt)[9])
    tokens, _ids = req.buffers
    assert tokens[:10].tolist() == prompt.tolist() and tokens.size == 10 + 16


def test_a_writable_prompt_is_copied_so_a_later_change_does_not_reach_the_shadow():
    shadow = SymbolicExecutor(num_blocks=8, block_size=4)
    prompt = np.arange(10, 20, dtype=np.int64)
    shadow.add_request("r0", prompt)
    prompt[0] = 99
    assert shadow.requests["r0"].tokens[0] == 10


def test_outputs_read_as_a_dict_of_lists_and_are_kept_packed():
    outputs = Outputs()
    outputs["a"] = [1, 2, 3]
    outputs["b"] = []
    assert outputs == {"a": [1, 2, 3], "b": []} and outputs["a"] == [1, 2, 3]
    assert "a" in outputs and "c" not in outputs and len(outputs) == 2
    assert outputs.setdefault("c", [7]) == [7] and outputs.get("d", ()) == ()
    assert outputs._packed["a"].itemsize == 2  # the narrowest that holds its ids
    outputs["wide"] = [-1, 40_000, 2**40]
    assert outputs["wide"] == [-1, 40_000, 2**40] and outputs._packed["wide"].itemsize == 8
    outputs["mid"] = [-(2**15), 2**15]
    assert outputs["mid"] == [-(2**15), 2**15] and outputs._packed["mid"].itemsize == 4
    del outputs["wide"], outputs["mid"]
    del outputs["b"]
    assert sorted(outputs) == ["a", "c"]


def test_the_hash_memory_forgets_the_oldest_hash_first(monkeypatch):
    monkeypatch.setattr(block_pool, "HASH_MEMORY_MAX", 4)
    checker = block_pool.BlockPoolChecker()

    def contents(ids):
        return ids * 10 + 1, np.ones(ids.size, dtype=bool)

    hash_of = {b: b"h%d" % b for b in range(10)}
    kept = []
    for step, fresh in enumerate([[0, 1], [2, 3], [4], [1, 5], [6, 7, 8]]):
        hashes = [hash_of[b] for b in fresh]
        assert checker.check_fresh(step, fresh, hashes, contents) == []
        kept.append(list(checker.content_of_hash))
        assert list(checker.hash_order) == kept[-1]
    assert kept[2] == [b"h1", b"h2", b"h3", b"h4"]
    assert kept[3] == [b"h3", b"h4", b"h1", b"h5"]  # h1 forgotten, then remembered anew
    assert kept[4] == [b"h5", b"h6", b"h7", b"h8"]


def test_a_waiting_request_keeps_no_prompt_in_the_ledger_until_it_is_read():
    built = []

    def prompt_of(trace_request):
        built.append(trace_request.request_id)
        return np.asarray(trace_request.prompt_token_ids, np.int64)

    result = RunResult("reference", EngineConfig(), SimOptions(), profile("unit"))
    ledger = Ledger(2, result, lambda rid, done: None, prompt_of)
    first = TraceRequest("a", 0.0, 3, prompt_token_ids=(5, 6, 7))
    later_turn = TraceRequest("b", 0.0, 3, prompt_token_ids=(8,), parent_request_id="a")
    handed = ledger.admit(Release(first, np.array([5, 6, 7], np.int64)), 0.0)
    ledger.admit(Release(later_turn, np.array([5, 6, 7, 1, 8], np.int64)), 0.0)
    assert handed.prompt_token_ids.tolist() == [5, 6, 7]  # the engine gets the array
    assert ledger.live["a"].num_prompt_tokens == 3 and built == []
    assert ledger.prompt("a").tolist() == [5, 6, 7] and built == ["a"]
    assert ledger.prompt("a").tolist() == [5, 6, 7] and built == ["a"]  # kept once read
    assert ledger.prompt("b").tolist() == [5, 6, 7, 1, 8] and built == ["a"]  # kept whole

    shadow = SymbolicExecutor(num_blocks=8, block_size=4)
    shadow.prompt_source = ledger.prompt
    shadow.add_request("a", np.array([5, 6, 7], np.int64))
    assert not isinstance(shadow.requests["a"].prompt, np.ndarray)
    assert shadow.requests["a"].tokens[:3].tolist() == [5, 6, 7]
