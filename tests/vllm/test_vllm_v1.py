"""vLLM v1's real Scheduler + KVCacheManager behind the Engine protocol (tox -e vllm-v1, the
newest release; vllm-v1-RELEASE for each release the adapter drives).

Block size 4; vLLM keeps block 0 as its null block, so the first request gets block 1.
Stand-in tokens: 1000 + 10 * step + sum of the id's bytes ("a" -> +97, "b" -> +98).
"""

from __future__ import annotations

import pytest
from vllm_driver import (
    NEEDS_VLLM_V1,
    check_snapshot,
    frees_unhashed_blocks_to_the_head,
    request,
    run_step,
    summary,
)

from schedcheck.engines.protocol import EngineConfig, FinishedRequest

pytestmark = NEEDS_VLLM_V1

PROMPT = tuple(range(10, 20))  # 10 tokens: blocks [10..13][14..17][18 19 . .]


def _engine(**overrides):
    from schedcheck.engines.registry import make_engine

    base = dict(
        block_size=4, num_gpu_blocks=16, max_num_batched_tokens=8, max_num_seqs=4, max_model_len=64
    )
    base.update(overrides)
    return make_engine("vllm-v1", EngineConfig(**base))


def test_registry_builds_the_real_scheduler():
    engine = _engine()
    assert engine.name == "vllm-v1"
    assert type(engine.scheduler).__module__ == "vllm.v1.core.sched.scheduler"
    snap = engine.kv_snapshot()
    assert snap.num_blocks == 16 and snap.reserved_block_ids == (0,)
    assert snap.ref_cnt().tolist() == [1] + [0] * 15  # only the null block is held
    assert list(snap.free_block_ids()) == list(range(1, 16))
    check_snapshot(snap)


def test_shared_prefix_with_chunked_prefill():
    """a's first chunk fills blocks 1, 2; b, a step later, hits them (8 tokens) and computes
    only the rest of its prompt beside a's last chunk."""
    engine = _engine()
    engine.add_request(request("a", PROMPT, 2))
    engine.add_request(request("b", PROMPT, 2))

    s1 = run_step(engine)
    assert [summary(r) for r in s1.output.scheduled] == [
        ("a", 0, 8, 10, 10, list(PROMPT[:8]), (1, 2), 0),  # budget 8: b gets nothing
    ]
    snap = engine.kv_snapshot()
    assert snap.ref_cnt().tolist()[:5] == [1, 1, 1, 0, 0]
    assert sorted(snap.cached_blocks()) == [1, 2]
    assert dict(snap.num_computed_tokens()) == {"a": 8}

    s2 = run_step(engine)
    assert [summary(r) for r in s2.output.scheduled] == [
        ("a", 8, 2, 10, 10, [18, 19], (1, 2, 3), 0),
        ("b", 8, 2, 10, 10, [18, 19], (1, 2, 4), 8),  # prefix hit: blocks 1, 2
    ]
    assert engine.kv_snapshot().ref_cnt().tolist()[:6] == [1, 2, 2, 1, 1, 0]

    s3 = run_step(engine)
    assert [summary(r) for r in s3.output.scheduled] == [
        ("a", 10, 1, 11, 10, [1117], (1, 2, 3), 0),
        ("b", 10, 1, 11, 10, [1118], (1, 2, 4), 0),
    ]
    assert s3.finished == [
        FinishedRequest("a", (1117, 1127), "length"),
        FinishedRequest("b", (1118, 1128), "length"),
    ]
    snap = engine.kv_snapshot()
    if frees_unhashed_blocks_to_the_head():  # 0.2x on
        # freed tail first: unhashed 3, 4 to the head (reused first), hashed 2, 1 to the tail
        assert list(snap.free_block_ids()) == [4, 3, *range(5, 16), 2, 1]
    else:  # before: every freed block to the tail, in the order freed: a's 3, b's 4, 2, 1
        assert list(snap.free_block_ids()) == [*range(5, 16), 3, 4, 2, 1]
    assert sorted(snap.cached_blocks()) == [1, 2]
    assert not engine.has_unfinished_requests()
    assert run_step(engine).output.finished_req_ids == ("a", "b")


def test_preemption_under_a_tiny_pool_reprefills_prompt_and_outputs():
    """6 usable blocks, two 8-token prompts growing to 14 tokens: b is preempted, then
    re-prefilled with its prompt (a cache hit) and every output it had emitted."""
    engine = _engine(num_gpu_blocks=7, max_num_batched_tokens=16)
    engine.add_request(request("a", range(100, 108), 6))
    engine.add_request(request("b", range(200, 208), 6))
    steps = [run_step(engine) for _ in range(7)]

    assert [summary(r) for r in steps[0].output.scheduled] == [
        ("a", 0, 8, 8, 8, list(range(100, 108)), (1, 2), 0),
        ("b", 0, 8, 8, 8, list(range(200, 208)), (3, 4), 0),
    ]
    assert all(s.output.preempted_req_ids == () for s in steps[:5])
    assert steps[5].output.preempted_req_ids == ("b",)
    assert [summary(r) for r in steps[5].output.scheduled] == [
        ("a", 12, 1, 13, 8, [1147], (1, 2, 5, 6), 0),  # took b's freed block 6
    ]
    assert steps[5].finished == [
        FinishedRequest("a", (1107, 1117, 1127, 1137, 1147, 1157), "length")
    ]
    b_outputs = [1108, 1118, 1128, 1138, 1148]
    assert [summary(r) for r in steps[6].output.scheduled] == [
        ("b", 8, 5, 13, 8, b_outputs, (3, 4, 6, 5), 8),  # prompt blocks 3, 4 still cached
    ]
    assert steps[6].finished == [FinishedRequest("b", (*b_outputs, 1168), "length")]
    assert steps[6].output.finished_req_ids == ("a",)


def test_abort_mid_prefill_keeps_written_blocks_for_the_next_request():
    """a (20 tokens) is aborted after two chunks; c with the same prompt hits those 16."""
    engine = _engine()
    prompt = range(30, 50)
    engine.add_request(request("a", prompt, 2))
    run_step(engine)
    s2 = run_step(engine)
    assert summary(s2.output.scheduled[0])[:3] == ("a", 8, 8)
    engine.abort_request("a")
    engine.abort_request("a")  # a finished id is ignored
    s3 = run_step(engine)
    assert s3.output.scheduled == () and s3.output.finished_req_ids == ("a",)
    assert s3.finished == []  # an empty step gets no update call: reported with the next
    assert sorted(engine.kv_snapshot().cached_blocks()) == [1, 2, 3, 4]

    engine.add_request(request("c", prompt, 1))
    s4 = run_step(engine)
    assert [summary(r) for r in s4.output.scheduled] == [
        ("c", 16, 4, 20, 20, [46, 47, 48, 49], (1, 2, 3, 4, 5), 16),
    ]
    assert s4.finished == [
        FinishedRequest("a", (), "abort"),
        FinishedRequest("c", (1139,), "length"),
    ]


def test_abort_between_schedule_and_update():
    engine = _engine()
    engine.add_request(request("a", range(30, 50), 2))
    aborted = []

    def abort(out):
        engine.abort_request("a")
        aborted.append(out.step)

    s1 = run_step(engine, before_update=abort)
    assert aborted == [1] and s1.finished == [FinishedRequest("a", (), "abort")]
    snap = engine.kv_snapshot()
    assert dict(snap.block_tables()) == {}
    assert snap.ref_cnt().tolist() == [1] + [0] * 15


def test_prompt_too_long_is_rejected_as_the_frontend_does():
    engine = _engine(max_model_len=16)
    engine.add_request(request("long", range(16), 1))
    s1 = run_step(engine)
    assert s1.output.rejected_req_ids == ("long",) and s1.output.scheduled == ()
    assert s1.output.rejected_reasons[0].startswith("prompt (length 16) plus at least one")
    assert not engine.has_unfinished_requests()


def test_exception_inside_vllm_surfaces(monkeypatch):
    """The simulator turns this into an engine-crash finding; the adapter must not swallow it."""
    engine = _engine()
    engine.add_request(request("a", PROMPT, 1))

    def boom(*args, **kwargs):
        raise ValueError("boom inside vLLM")

    monkeypatch.setattr(engine.scheduler.kv_cache_manager, "allocate_slots", boom)
    with pytest.raises(ValueError, match="boom inside vLLM"):
        engine.schedule()


def test_evictions_of_cached_blocks_are_counted():
    """3 usable blocks: a's two cached blocks go to the tail of the free queue (block 2
    before 1, vLLM frees a table in reverse); b takes the unused block 3, then evicts 2."""
    engine = _engine(num_gpu_blocks=4)
    engine.add_request(request("a", range(30, 38), 1))
    run_step(engine)
    assert engine.kv_snapshot().num_evicted_blocks == 0
    engine.add_request(request("b", range(60, 68), 1))
    s2 = run_step(engine)
    assert s2.tables == {"b": (3, 2)}
    assert engine.kv_snapshot().num_evicted_blocks == 1


def test_the_pool_checks_point_reads_and_every_tables_ends():
    """After a's and b's second chunk (b hit a's blocks 1, 2): the incremental pool check's
    reads, exact, and `table_ends` as the lazy views give it, read in C."""
    import numpy as np

    engine = _engine()
    engine.add_request(request("a", PROMPT, 2))
    engine.add_request(request("b", PROMPT, 2))
    run_step(engine)
    run_step(engine)
    snap = engine.kv_snapshot()
    assert snap.table_ends() == (["a", "b"], [3, 3], [3, 4])
    views = snap.block_table_views()
    assert snap.table_ends() == (
        list(views),
        [len(t) for t in views.values()],
        [t[-1] for t in views.values()],
    )
    ids = np.array([1, 2, 3, 4, 5], np.int64)
    assert snap.ref_cnt_of(ids).dtype == np.int64
    assert snap.ref_cnt_of(ids).tolist() == [2, 2, 1, 1, 0]
    assert snap.is_free(ids).tolist() == [False, False, False, False, True]
