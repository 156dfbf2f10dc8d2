"""SGLang 0.5.23's real Scheduler, radix tree and allocator behind the Engine protocol
(tox -e sglang): exact KV slot indices, read from SGLang's own req_to_token rows.

Page size 1 and 64 slots: SGLang keeps slot 0 for padding, so its TokenToKVPoolAllocator
hands out slots 1..63, lowest first, and freed slots go to the back of its free list.
Output tokens come from the shadow KV (the hash model), so they are the same in every run.
"""

from __future__ import annotations

import numpy as np
from sglang_driver import SGLANG_0_5_23, Driver, config, request, summary

pytestmark = SGLANG_0_5_23

PROMPT = tuple(range(10, 20))  # 10 tokens


def test_a_prefix_hit_reads_the_first_requests_slots():
    """b shares a's 10-token prompt. When a finishes, SGLang inserts its 11 tokens with KV
    (prompt + first output; the last output has none) into the tree: slots 1..10 hold the
    prompt, slot 11 a's first output. b's prompt continues with 50, not a's output, so it
    hits 10 tokens, reads slots 1..10 and writes its own two tokens into slots 12, 13."""
    d = Driver(config())
    d.add(request("a", PROMPT, 2))
    d.run()
    d.add(request("b", (*PROMPT, 50, 51), 2))
    d.run()
    assert [summary(o) for o in d.outputs] == [
        [("a", 0, 10, 0, tuple(range(1, 11)))],
        [("a", 10, 1, 0, (11,))],
        [("b", 10, 2, 10, (12, 13))],  # admitted with a 10-token hit
        [("b", 12, 1, 0, (14,))],
    ]
    b_first = d.outputs[2].scheduled[0]
    assert b_first.slots == (*range(1, 11), 12, 13)  # the row attention reads
    assert b_first.block_table == b_first.slots  # page size 1: pages are slots
    assert d.violations == []
    assert {rid: f.reason for rid, f in d.finished.items()} == {"a": "length", "b": "length"}


def test_a_chunked_prefill_continues_in_the_same_row():
    """A 4-token budget splits the 10-token prompt into chunks 4 + 4 + 2 (PrefillAdder):
    between chunks SGLang checkpoints the partial prompt into the tree and matches it again,
    so each chunk starts where the last ended and the row keeps slots 1..10 in order."""
    d = Driver(config(max_num_batched_tokens=4))
    d.add(request("a", PROMPT, 2))
    d.run()
    assert [summary(o) for o in d.outputs] == [
        [("a", 0, 4, 0, (1, 2, 3, 4))],
        [("a", 4, 4, 0, (5, 6, 7, 8))],
        [("a", 8, 2, 0, (9, 10))],  # the last chunk samples
        [("a", 10, 1, 0, (11,))],
    ]
    assert [r.samples for o in d.outputs for r in o.scheduled] == [False, False, True, True]
    assert d.violations == []


def test_a_retraction_frees_the_row_and_resumes_from_the_tree(monkeypatch):
    """SGLang's own retraction test hook (SGLANG_TEST_RETRACT, interval 3) retracts at its
    third forward. retract_decode picks b (the retraction order's last), frees its row
    without inserting its outputs, and requeues it; b resumes with a hit on its 8-token
    prompt (checkpointed after its prefill) and recomputes its three outputs' positions
    8..10 into fresh slots 22..24, sampling its fourth token from there."""
    import sglang.srt.managers.scheduler as sglang_scheduler

    monkeypatch.setattr(sglang_scheduler, "TEST_RETRACT", True)
    monkeypatch.setattr(sglang_scheduler, "TEST_RETRACT_INTERVAL", 3)
    monkeypatch.setattr(sglang_scheduler, "TEST_RETRACT_NO_PREFILL_BS", 10)
    d = Driver(config(max_num_batched_tokens=32))
    d.add(request("a", range(10, 18), 4))
    d.add(request("b", range(30, 38), 4))
    d.run()
    assert [(summary(o), o.preempted_req_ids) for o in d.outputs] == [
        ([("a", 0, 8, 0, tuple(range(1, 9))), ("b", 0, 8, 0, tuple(range(9, 17)))], ()),
        ([("a", 8, 1, 0, (17,)), ("b", 8, 1, 0, (18,))], ()),
        ([("a", 9, 1, 0, (19,)), ("b", 9, 1, 0, (20,))], ()),
        ([("a", 10, 1, 0, (21,))], ("b",)),  # retracted: slots 18, 20 freed
        ([("b", 8, 3, 8, (22, 23, 24))], ()),  # resumed: hit on its prompt, slots 9..16
    ]
    assert d.outputs[4].scheduled[0].slots == (*range(9, 17), 22, 23, 24)
    assert d.violations == []
    assert [len(d.finished[r].output_token_ids) for r in "ab"] == [4, 4]


def test_an_aborted_running_request_runs_once_more_and_its_kv_is_shared():
    """SGLang's abort of a running request takes effect after one more forward ("abort
    method 3"): a's decode of its first output (position 10, slot 11) runs after the abort
    and the tree keeps it. The step reaches the shadow KV as `discarded`, so b, a later turn
    (a's prompt + a's output + 60), reads slot 11 through its 11-token hit and finds a's KV
    there (before this was modelled, the shadow KV reported it as never written)."""
    d = Driver(config())
    d.add(request("a", PROMPT, 4))
    d.step()  # a's prefill samples its first output
    d.abort("a")
    out0 = d.finished["a"].output_token_ids if "a" in d.finished else None
    assert out0 is None  # reported by the engine's next update, as vLLM's adapters do
    hidden = d.step()  # nothing of ours runs; SGLang decodes a once more
    assert (hidden.scheduled, [summary_of(r) for r in hidden.discarded]) == (
        (),
        [("a", 10, 1, (11,))],
    )
    first = d.engine._pending_finished[0] if d.engine._pending_finished else None
    assert first is not None and first.reason == "abort" and len(first.output_token_ids) == 1
    d.add(request("b", (*PROMPT, first.output_token_ids[0], 60), 2))
    d.run()
    assert [summary(o) for o in d.outputs[2:]] == [
        [("b", 11, 1, 11, (12,))],  # hit: a's prompt and a's first output (slots 1..11)
        [("b", 12, 1, 0, (13,))],
    ]
    assert d.violations == []


def summary_of(r) -> tuple:
    return (
        r.request_id,
        r.num_computed_tokens,
        r.num_scheduled_tokens,
        r.slots[r.num_computed_tokens : r.num_end_tokens],
    )


def test_the_shadow_kv_finds_a_planted_off_by_one_in_the_prefix_slots(monkeypatch):
    """Planted: the tree hands a prefix hit's slots shifted by one
    (`UnifiedRadixCache.prefix_device_indices` + 1), so b's row reads key 0 from slot 2,
    where a wrote its position 1. The out_cache_loc check passes (b's own writes are
    right); the shadow KV finds the read at b's first step."""
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    original = UnifiedRadixCache.prefix_device_indices
    monkeypatch.setattr(
        UnifiedRadixCache, "prefix_device_indices", lambda self, req: original(self, req) + 1
    )
    d = Driver(config())
    d.add(request("a", PROMPT, 2))
    d.run()
    d.add(request("b", (*PROMPT, 50, 51), 2))
    d.step()
    assert d.outputs[-1].scheduled[0].slots == (*range(2, 12), 12, 13)
    first = d.violations[0]
    assert (first.invariant, first.step, first.request_id) == ("shadow-kv.read", 3, "b")
    assert (first.position, first.slot) == (0, 2)
    assert first.found == "the KV of a position 1 (written at step 1)"


def test_sglang_is_registered_and_replays_through_the_simulator():
    """The registry names the adapter; a tiny trace replays with every invariant clean."""
    from schedcheck.engines.registry import BUILTIN_ENGINES, capabilities
    from schedcheck.sim.loop import run
    from schedcheck.traces.schema import TraceRequest

    assert BUILTIN_ENGINES["sglang"] == "schedcheck.engines.sglang.factory:make_engine"
    caps = capabilities("sglang")
    assert (caps.spare_blocks, caps.block_sizes, caps.priorities) == (3, (1, 4, 16), False)
    trace = [
        TraceRequest(
            f"r{i}", 0.01 * i, 3, input_length=12 + i, hash_ids=(1, 2 + i), hash_block_size=16
        )
        for i in range(6)
    ]
    result = run(trace, "sglang", config(block_size=4, num_gpu_blocks=32))
    assert result.violations == []
    assert sorted(result.outputs) == [f"r{i}" for i in range(6)]
    assert all(len(tokens) == 3 for tokens in result.outputs.values())


def test_a_pause_for_a_weight_update_retracts_the_chunked_prefill_too():
    """The preempt fault, with a prefill between chunks, may pause SGLang as an RL trainer
    does around a weight update (pause_generation(mode="retract"), continue_generation):
    a, two chunks into its 10-token prompt, goes back to the waiting queue, behind b.
    Only a's first chunk had been checkpointed into the tree (the second is checkpointed
    when the next chunk is added, which the pause cut off), so a comes back with a 4-token
    hit on slots 1..4 and recomputes positions 4..9 into fresh slots."""
    d = Driver(config(max_num_batched_tokens=4))
    d.add(request("a", PROMPT, 2))
    d.add(request("b", range(30, 36), 3))
    d.step()
    d.step()
    assert d.engine.scheduler.chunked_req is not None  # a, between two chunks
    what = d.engine.inject_fault("preempt", np.random.default_rng(2))  # first draw 0.26
    assert what.startswith("pause_generation(retract)")
    d.run()
    assert [(summary(o), o.preempted_req_ids) for o in d.outputs] == [
        ([("a", 0, 4, 0, (1, 2, 3, 4))], ()),
        ([("a", 4, 4, 0, (5, 6, 7, 8))], ()),
        ([("b", 0, 4, 0, (9, 10, 11, 12))], ("a",)),  # retracted mid-prefill
        ([("b", 4, 2, 0, (13, 14)), ("a", 4, 2, 4, (15, 16))], ()),  # a: a 4-token hit
        ([("a", 6, 4, 0, (17, 18, 19, 20))], ()),
        ([("b", 6, 1, 0, (21,)), ("a", 10, 1, 0, (22,))], ()),
        ([("b", 7, 1, 0, (23,))], ()),
    ]
    assert d.outputs[3].scheduled[1].num_cached_tokens == 4
    assert d.violations == []
    assert {r: len(f.output_token_ids) for r, f in d.finished.items()} == {"a": 2, "b": 3}


def test_a_request_the_pause_retracted_is_reported_though_admitted_again_at_once():
    """Alone in the queue, a is admitted again by the very next schedule() (no radix
    cache: it starts over at 0). The retraction is still in that step's preempted ids
    (found at the pause, not looked for after the scheduling), so the accounting sees a
    re-admission, not a chunk that overlaps the last one (the first campaign with the
    pause reported `accounting.contiguity` here: the adapter's, fixed)."""
    d = Driver(config(max_num_batched_tokens=16, enable_prefix_caching=False, max_model_len=64))
    d.add(request("a", range(100, 148), 1))
    d.step()
    d.step()
    what = d.engine.inject_fault("preempt", np.random.default_rng(2))
    assert what.startswith("pause_generation(retract)")
    d.run()
    assert [(summary(o)[0][:3], o.preempted_req_ids) for o in d.outputs] == [
        (("a", 0, 16), ()),
        (("a", 16, 16), ()),
        (("a", 0, 16), ("a",)),  # retracted and admitted again in one output
        (("a", 16, 16), ()),
        (("a", 32, 16), ()),
    ]
    assert d.violations == []
