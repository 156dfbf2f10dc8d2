"""The bug classes of docs/bug-classes.md through the reference engine, for both block managers.

Style of vLLM's tests/v1/core/test_prefix_caching.py: block_size 4, exact block ids,
exact free-queue order and exact num_computed_tokens after each step. Where the two
managers differ (the radix tree dedups pages; hashed keeps cached blocks in its free queue)
each expectation is written per manager.
"""

from __future__ import annotations

import pytest
from refengine_helpers import BLOCK_MANAGERS, by_id, engine, request, step, summary, tokens

from schedcheck.engines.reference.request import RequestStatus


def _free(eng) -> list[int]:
    return list(eng.kv_snapshot().free_block_ids())


def _cached(eng) -> list[int]:
    return sorted(eng.kv_snapshot().cached_blocks())


def _ref_cnt(eng) -> list[int]:
    return eng.kv_snapshot().ref_cnt().tolist()


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_prefix_hit_exact_blocks(bm):
    """A prefills 10 tokens; B shares its first 8 and hits two full blocks."""
    eng = engine(bm)
    eng.add_request(request("A", range(10), max_tokens=3))
    out, _ = step(eng)
    assert summary(out) == [("A", 0, 10, (0, 1, 2))]
    assert out.scheduled[0].num_cached_tokens == 0
    assert _cached(eng) == [0, 1]  # blocks 0, 1 full and written; block 2 holds 2 tokens
    assert _free(eng) == [3, 4, 5, 6, 7, 8, 9]
    assert _ref_cnt(eng) == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]

    eng.add_request(request("B", tokens(range(8), 100, 101, 102), max_tokens=2))
    out, _ = step(eng)
    assert summary(out) == [("A", 10, 1, (0, 1, 2)), ("B", 8, 3, (0, 1, 3))]
    assert by_id(out)["B"].num_cached_tokens == 8
    assert _ref_cnt(eng) == [2, 2, 1, 1, 0, 0, 0, 0, 0, 0]
    assert eng.kv_snapshot().num_computed_tokens() == {"A": 11, "B": 11}

    out, finished = step(eng)  # A emits its third token and finishes; B its second
    assert summary(out) == [("A", 11, 1, (0, 1, 2)), ("B", 11, 1, (0, 1, 3))]
    assert [f.request_id for f in finished] == ["A", "B"]
    assert [f.reason for f in finished] == ["length", "length"]
    if bm == "hashed":
        # Both freed tail first: A's [2, 1, 0] then B's [3, 1, 0]; a block joins the
        # queue when its last holder lets go.
        assert _free(eng) == [4, 5, 6, 7, 8, 9, 2, 3, 1, 0]
        assert _cached(eng) == [0, 1, 2, 3]
    else:
        # Finish inserts the written full pages: A's page 2 and B's page 3 join the tree.
        assert _free(eng) == [4, 5, 6, 7, 8, 9]
        assert _cached(eng) == [0, 1, 2, 3]
    assert _ref_cnt(eng) == [0] * 10
    out, _ = step(eng)
    assert out.scheduled == () and out.finished_req_ids == ("A", "B")
    assert not eng.has_unfinished_requests()


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_exact_multiple_of_block_size_chunked(bm):
    """Prompt of 8 = 2 blocks in chunks of 4: the table holds cdiv(num_tokens, 4) blocks."""
    eng = engine(bm, max_num_batched_tokens=4)
    eng.add_request(request("A", range(8), max_tokens=3))
    tables = []
    for _ in range(4):
        out, _ = step(eng)
        (sched,) = out.scheduled
        tables.append((sched.num_computed_tokens, sched.num_scheduled_tokens, sched.block_table))
    assert tables == [
        (0, 4, (0,)),
        (4, 4, (0, 1)),  # the last prompt chunk ends exactly on a block boundary
        (8, 1, (0, 1, 2)),  # the first decode's token is the 9th: a third block
        (9, 1, (0, 1, 2)),
    ]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_fully_cached_prompt_recomputes_last_block(bm):
    """B's prompt equals A's (8 tokens, a multiple of 4): the hit is capped at 7 -> 1 block."""
    eng = engine(bm)
    eng.add_request(request("A", range(8), max_tokens=1))
    out, finished = step(eng)
    assert summary(out) == [("A", 0, 8, (0, 1))]
    assert [f.request_id for f in finished] == ["A"]
    if bm == "hashed":
        assert _free(eng) == [2, 3, 4, 5, 6, 7, 8, 9, 1, 0]
    else:
        assert _free(eng) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert _cached(eng) == [0, 1]

    eng.add_request(request("B", range(8), max_tokens=2))
    out, _ = step(eng)
    assert summary(out) == [("B", 4, 4, (0, 2))]
    assert out.scheduled[0].num_cached_tokens == 4
    assert out.scheduled[0].samples  # one token is computed: logits exist
    if bm == "hashed":
        # Block 2 now holds the same content as cached block 1: the first copy keeps the
        # hash, block 2 stays a private block.
        assert _cached(eng) == [0, 1]
        assert eng.kv_snapshot().block_tables()["B"] == [0, 2]
    else:
        # The insert finds page 1 in the tree: B's duplicate page 2 is freed at once and
        # its table switches to the tree's page.
        assert eng.kv_snapshot().block_tables()["B"] == [0, 1]
        assert _free(eng) == [3, 4, 5, 6, 7, 8, 9, 2]
    out, _ = step(eng)
    assert summary(out)[0][:3] == ("B", 8, 1)


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_same_prefix_twice_in_one_step_no_hit(bm):
    """A and B with the same 12-token prompt in one step: B gets no hit from A's new blocks."""
    eng = engine(bm)
    eng.add_request(request("A", range(12), max_tokens=2))
    eng.add_request(request("B", range(12), max_tokens=2))
    out, _ = step(eng)
    assert summary(out) == [("A", 0, 12, (0, 1, 2)), ("B", 0, 12, (3, 4, 5))]
    assert [r.num_cached_tokens for r in out.scheduled] == [0, 0]
    snapshot = eng.kv_snapshot()
    if bm == "hashed":
        assert _cached(eng) == [0, 1, 2]  # B's equal blocks stay private
        assert snapshot.block_tables() == {"A": [0, 1, 2], "B": [3, 4, 5]}
        assert _free(eng) == [6, 7, 8, 9]
    else:
        assert _cached(eng) == [0, 1, 2]
        assert snapshot.block_tables() == {"A": [0, 1, 2], "B": [0, 1, 2]}
        assert _free(eng) == [6, 7, 8, 9, 3, 4, 5]  # B's duplicates freed once
    out, _ = step(eng)
    if bm == "hashed":
        assert summary(out) == [("A", 12, 1, (0, 1, 2, 6)), ("B", 12, 1, (3, 4, 5, 7))]
    else:
        assert summary(out) == [("A", 12, 1, (0, 1, 2, 6)), ("B", 12, 1, (0, 1, 2, 7))]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_preemption_mid_prefill_then_resume_with_hit(bm):
    """B runs out of blocks mid-prefill, preempts itself, resumes from its cached block."""
    eng = engine(bm, num_gpu_blocks=6, max_num_batched_tokens=8)
    eng.add_request(request("A", range(8), max_tokens=10))
    out, _ = step(eng)
    assert summary(out) == [("A", 0, 8, (0, 1))]
    eng.add_request(request("B", range(100, 116), max_tokens=2))
    out, _ = step(eng)
    assert summary(out) == [("A", 8, 1, (0, 1, 2)), ("B", 0, 7, (3, 4))]
    # B needs cdiv(14, 4) = 4 blocks, holds 2, one is free: it is the latest arrival, so
    # it is its own victim; the waiting queue is skipped in a step that preempted.
    out, _ = step(eng)
    assert summary(out) == [("A", 9, 1, (0, 1, 2))]
    assert out.preempted_req_ids == ("B",)
    b = eng.scheduler.requests["B"]
    assert b.status is RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert eng.waiting_reasons() == {
        "B": "preempted 1x; the waiting queue is skipped in a step that preempted a request"
    }
    if bm == "hashed":
        assert _free(eng) == [5, 4, 3]  # freed tail first; block 3 is cached (B[0:4])
    else:
        assert _free(eng) == [5, 4]  # page 3 belongs to the tree (evictable)
    assert _cached(eng) == [0, 1, 3]
    out, _ = step(eng)
    assert summary(out) == [("A", 10, 1, (0, 1, 2)), ("B", 4, 7, (3, 5, 4))]
    assert by_id(out)["B"].num_cached_tokens == 4


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_preempted_decode_reprefills_prompt_and_outputs(bm):
    """A decoding request preempted by recompute re-prefills prompt + every output (#11)."""
    eng = engine(bm, num_gpu_blocks=5, max_num_batched_tokens=32, enable_prefix_caching=False)
    eng.add_request(request("A", range(8), max_tokens=12))  # 19 KV tokens: 5 blocks
    eng.add_request(request("B", range(50, 58), max_tokens=12))
    step(eng, {"A": 900, "B": 800})  # both prefill 8 tokens: blocks (0, 1) and (2, 3)
    step(eng, {"A": 901, "B": 801})  # A takes block 4; B cannot grow: B preempted
    b = eng.scheduler.requests["B"]
    assert b.status is RequestStatus.PREEMPTED
    assert b.output_token_ids == [800]
    for token in range(902, 906):
        out, _ = step(eng, {"A": token})  # B keeps waiting: 3 blocks needed, <= 2 free
        assert [r.request_id for r in out.scheduled] == ["A"]
    eng.abort_request("A")  # make room for B
    out, finished = step(eng, {"B": 802})
    (sched,) = out.scheduled
    assert (sched.request_id, sched.num_computed_tokens, sched.num_scheduled_tokens) == ("B", 0, 9)
    assert sched.num_tokens == 9 and sched.samples
    assert sched.token_ids.tolist() == [*range(50, 58), 800]
    assert [f.reason for f in finished] == ["abort"]
    assert eng.scheduler.requests["B"].output_token_ids == [800, 802]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_abort_mid_chunk_keeps_only_written_blocks_cached(bm):
    """Abort between schedule() and update_from_output() of A's second chunk."""
    eng = engine(bm, max_num_batched_tokens=6)
    eng.add_request(request("A", range(16), max_tokens=1))
    out, _ = step(eng)
    assert summary(out) == [("A", 0, 6, (0, 1))]
    assert _cached(eng) == [0]
    output = eng.schedule()
    assert summary(output) == [("A", 6, 6, (0, 1, 2))]
    eng.abort_request("A")  # mid-chunk: the chunk [6, 12) never completes
    finished = eng.update_from_output(output, {})
    assert [(f.request_id, f.reason, f.output_token_ids) for f in finished] == [("A", "abort", ())]
    assert _cached(eng) == [0]  # block 1 was half written: not cached
    if bm == "hashed":
        assert _free(eng) == [3, 4, 5, 6, 7, 8, 9, 2, 1, 0]
    else:
        assert _free(eng) == [3, 4, 5, 6, 7, 8, 9, 2, 1]
    assert _ref_cnt(eng) == [0] * 10
    eng.add_request(request("C", range(16), max_tokens=1))
    out, _ = step(eng)
    assert out.finished_req_ids == ("A",)
    assert by_id(out)["C"].num_cached_tokens == 4


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_abort_waiting_and_running(bm):
    eng = engine(bm, max_num_seqs=1)
    eng.add_request(request("A", range(5), max_tokens=4))
    eng.add_request(request("B", range(5), max_tokens=4))
    step(eng)
    assert eng.waiting_reasons() == {"B": "max_num_seqs (1) requests running"}
    eng.abort_request("B")  # waiting
    eng.abort_request("A")  # running
    eng.abort_request("A")  # again: ignored
    eng.abort_request("nope")  # unknown: ignored
    out = eng.schedule()
    assert out.scheduled == () and out.finished_req_ids == ("B", "A")
    finished = eng.update_from_output(out, {})
    assert [(f.request_id, f.reason, len(f.output_token_ids)) for f in finished] == [
        ("B", "abort", 0),
        ("A", "abort", 1),
    ]
    assert not eng.has_unfinished_requests()


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_just_matched_block_is_not_evicted(bm):
    """B's hit blocks are at the head of the free queue; B's new block comes from after them."""
    eng = engine(bm, num_gpu_blocks=5)
    eng.add_request(request("A", range(8), max_tokens=1))
    step(eng)  # A: blocks (0, 1), finished
    eng.add_request(request("C", range(200, 212), max_tokens=1))
    out, _ = step(eng)
    if bm == "hashed":
        assert summary(out) == [("C", 0, 12, (2, 3, 4))]
        assert _free(eng) == [1, 0, 4, 3, 2]  # A's, then C's, tail first
    else:
        assert summary(out) == [("C", 0, 12, (2, 3, 4))]
        assert _free(eng) == []  # every page is in the tree
    eng.add_request(request("B", tokens(range(8), 7, 7, 7), max_tokens=1))
    out, _ = step(eng)
    # Hit = blocks (0, 1) at the queue head; they are touched before the new block is
    # taken, so the new block is 4 (hashed: next in the queue; radix: C's leaf evicted
    # tail first, A's locked leaf survives).
    assert summary(out) == [("B", 8, 3, (0, 1, 4))]
    assert by_id(out)["B"].num_cached_tokens == 8


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_rejections_have_reasons(bm):
    eng = engine(bm, num_gpu_blocks=4, max_model_len=20)
    eng.add_request(request("long", range(15), max_tokens=6))  # 21 > max_model_len
    eng.add_request(request("big", range(12), max_tokens=6))  # 17 tokens need 5 blocks
    eng.add_request(request("ok", range(12), max_tokens=5))  # 16 tokens: 4 blocks
    out, finished = step(eng)
    assert out.rejected_req_ids == ("long", "big")
    assert out.rejected_reasons == (
        "prompt (15 tokens) + max_tokens (6) = 21 exceeds max_model_len (20)",
        "needs 5 KV blocks for 17 tokens; the cache has 4 blocks of 4 tokens",
    )
    assert [(f.request_id, f.reason) for f in finished] == [
        ("long", "rejected: " + out.rejected_reasons[0]),
        ("big", "rejected: " + out.rejected_reasons[1]),
    ]
    assert summary(out) == [("ok", 0, 12, (0, 1, 2))]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_draft_slots_count_in_the_rejection_and_are_capped_at_max_model_len(bm):
    """2 drafts: "ok" needs 13 + 2 slots (4 blocks of 4), "big" 16 + 2 (5 > 4 blocks);
    "edge" is capped: max_model_len 20 leaves 1 slot past its 19 KV tokens (5 blocks)."""
    eng = engine(bm, num_gpu_blocks=4, max_model_len=20, num_lookahead_tokens=2)
    eng.add_request(request("big", range(12), max_tokens=5))
    eng.add_request(request("edge", range(15), max_tokens=5))
    eng.add_request(request("ok", range(12), max_tokens=2))
    out, _ = step(eng)
    assert out.rejected_reasons == (
        "needs 5 KV blocks for 16 tokens + 2 lookahead; the cache has 4 blocks of 4 tokens",
        "needs 5 KV blocks for 19 tokens + 1 lookahead; the cache has 4 blocks of 4 tokens",
    )
    assert summary(out) == [("ok", 0, 12, (0, 1, 2, 3))]  # 12 tokens + 2 drafts: 4 blocks


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_chunked_prefill_off(bm):
    """With chunked prefill off a prompt that does not fit the remaining budget waits."""
    eng = engine(bm, max_num_batched_tokens=12, enable_chunked_prefill=False)
    eng.add_request(request("too-long", range(10), max_tokens=4))  # 13 KV tokens > 12
    eng.add_request(request("A", range(100, 108), max_tokens=2))
    eng.add_request(request("B", range(200, 206), max_tokens=2))
    out, _ = step(eng)
    assert out.rejected_req_ids == ("too-long",)
    assert "chunked prefill is off" in out.rejected_reasons[0]
    assert summary(out) == [("A", 0, 8, (0, 1))]
    assert eng.waiting_reasons() == {
        "B": "chunked prefill is off and its 6 tokens exceed the 4 tokens left in this "
        "step's budget"
    }
    out, _ = step(eng)
    assert summary(out) == [("A", 8, 1, (0, 1, 2)), ("B", 0, 6, (3, 4))]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_long_prefill_token_threshold_and_budget(bm):
    eng = engine(bm, num_gpu_blocks=20, max_num_batched_tokens=10, long_prefill_token_threshold=3)
    eng.add_request(request("A", range(7), max_tokens=2))
    eng.add_request(request("B", range(100, 107), max_tokens=2))
    eng.add_request(request("C", range(200, 207), max_tokens=2))
    eng.add_request(request("D", range(300, 307), max_tokens=2))
    out, _ = step(eng)
    assert [(r[0], r[1], r[2]) for r in summary(out)] == [
        ("A", 0, 3),
        ("B", 0, 3),
        ("C", 0, 3),
        ("D", 0, 1),  # the budget's last token
    ]
    out, _ = step(eng)
    assert [(r[0], r[1], r[2]) for r in summary(out)] == [
        ("A", 3, 3),
        ("B", 3, 3),
        ("C", 3, 3),
        ("D", 1, 1),
    ]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_priority_policy_order_and_victim(bm):
    """Priority: lower value first; the victim is the largest value, then latest arrival."""
    eng = engine(bm, num_gpu_blocks=4, extra={"policy": "priority"}, enable_prefix_caching=False)
    eng.add_request(request("low", range(4), max_tokens=8, priority=5, arrival_time_s=0.0))
    eng.add_request(request("high", range(10, 14), max_tokens=8, priority=0, arrival_time_s=1.0))
    out, _ = step(eng)
    assert summary(out) == [("high", 0, 4, (0,)), ("low", 0, 4, (1,))]
    out, _ = step(eng)  # both decode: 5 tokens each need 2 blocks
    assert summary(out) == [("high", 4, 1, (0, 2)), ("low", 4, 1, (1, 3))]
    for _ in range(4):
        out, _ = step(eng)
    # 9 tokens need 3 blocks each: high grows first and preempts low.
    assert out.preempted_req_ids == ("low",)
    assert summary(out) == [("high", 8, 1, (0, 2, 3))]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_chunk_align_block_mode(bm):
    """chunk_align=block (vLLM v0 rule): a non-final chunk ends on a block boundary."""
    eng = engine(bm, max_num_batched_tokens=6, extra={"chunk_align": "block"})
    eng.add_request(request("A", range(15), max_tokens=1))
    ends = []
    for _ in range(4):
        out, _ = step(eng)
        ends.append(out.scheduled[0].num_end_tokens)
    assert ends == [4, 8, 12, 15]  # 6, 10, 14 are cut back; the final chunk is not


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_chunk_align_deterministic_mode(bm):
    """chunk_align=deterministic: a cache-miss prefill stops at the prompt's last boundary."""
    eng = engine(bm, extra={"chunk_align": "deterministic"})
    eng.add_request(request("A", range(14), max_tokens=2))
    out, _ = step(eng)
    assert summary(out) == [("A", 0, 12, (0, 1, 2))]
    out, _ = step(eng)
    assert summary(out) == [("A", 12, 2, (0, 1, 2, 3))]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_prefix_caching_off_never_hits(bm):
    eng = engine(bm, enable_prefix_caching=False)
    eng.add_request(request("A", range(8), max_tokens=1))
    step(eng)
    eng.add_request(request("B", range(8), max_tokens=1))
    out, _ = step(eng)
    assert summary(out) == [("B", 0, 8, (2, 3))]
    assert _cached(eng) == []


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_cache_salt_separates_namespaces(bm):
    eng = engine(bm)
    eng.add_request(request("A", range(8), max_tokens=1, cache_salt="tenant-1"))
    step(eng)
    eng.add_request(request("B", range(8), max_tokens=1, cache_salt="tenant-2"))
    eng.add_request(request("C", range(8), max_tokens=1, cache_salt="tenant-1"))
    out, _ = step(eng)
    assert [(r.request_id, r.num_cached_tokens) for r in out.scheduled] == [("B", 0), ("C", 4)]


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_snapshot_ref_cnt_matches_block_tables(bm):
    eng = engine(bm, num_gpu_blocks=12)
    for i in range(3):
        eng.add_request(request(f"R{i}", tokens(range(8), range(10 * i, 10 * i + 3)), 3))
    for _ in range(3):
        step(eng)
        snapshot = eng.kv_snapshot()
        counts = [0] * snapshot.num_blocks
        for table in snapshot.block_tables().values():
            for block_id in table:
                counts[block_id] += 1
        assert snapshot.ref_cnt().tolist() == counts
        assert not snapshot.ref_cnt().flags.writeable
        free = list(snapshot.free_block_ids())
        assert all(counts[b] == 0 for b in free) and len(set(free)) == len(free)


def test_duplicate_request_id_is_an_error():
    eng = engine()
    eng.add_request(request("A", range(3)))
    with pytest.raises(ValueError, match="already in the engine"):
        eng.add_request(request("A", range(3)))


def test_missing_sampled_token_is_an_error():
    eng = engine()
    eng.add_request(request("A", range(3)))
    out = eng.schedule()
    with pytest.raises(ValueError, match="no token for it"):
        eng.update_from_output(out, {})


@pytest.mark.parametrize("bm", BLOCK_MANAGERS)
def test_snapshot_counts_evicted_cached_blocks(bm):
    eng = engine(bm, num_gpu_blocks=4)
    eng.add_request(request("A", range(8), max_tokens=1))
    step(eng)  # blocks 0, 1 cached, then free (hashed) / evictable (radix)
    assert eng.kv_snapshot().num_evicted_blocks == 0
    eng.add_request(request("B", range(100, 112), max_tokens=1))
    out, _ = step(eng)  # 3 blocks: 2 free + 1 evicted (radix evicts A's whole leaf)
    assert summary(out) == [("B", 0, 12, (2, 3, 1))]
    assert eng.kv_snapshot().num_evicted_blocks == (1 if bm == "hashed" else 2)
