"""The reference engine behind the protocol: registry, config errors, small pieces."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from refengine_helpers import ShadowDriver, engine, ideal_outputs, request

from schedcheck.engines.protocol import Engine, EngineConfig, KVSnapshot, ScheduledRequest
from schedcheck.engines.reference import fast_output
from schedcheck.engines.reference.chunking import align_chunk
from schedcheck.engines.reference.engine import ReferenceEngine
from schedcheck.engines.reference.request_queue import FCFSQueue, PriorityQueue, make_queue
from schedcheck.engines.registry import make_engine as make_by_name


@pytest.mark.parametrize("bm", ["hashed", "radix"])
def test_registry_builds_it_and_it_implements_the_protocol(bm):
    config = EngineConfig(block_manager=bm, num_gpu_blocks=300)
    eng = make_by_name("reference", config)
    assert isinstance(eng, ReferenceEngine) and isinstance(eng, Engine)
    assert eng.name == "reference"
    snapshot = eng.kv_snapshot()
    assert isinstance(snapshot, KVSnapshot)
    assert (snapshot.block_size, snapshot.num_blocks) == (16, 300)
    assert list(snapshot.free_block_ids()) == list(range(300))
    assert not eng.has_unfinished_requests()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (EngineConfig(block_manager="v2"), "unknown block_manager 'v2'"),
        (EngineConfig(block_manager="radix", extra={"page_size": "8"}), "page_size 8 != block"),
        (EngineConfig(extra={"policy": "lifo"}), "unknown scheduling policy 'lifo'"),
        (EngineConfig(extra={"chunk_align": "page"}), "chunk_align 'page'"),
        (
            EngineConfig(max_num_batched_tokens=15, extra={"chunk_align": "block"}),
            'chunk_align "block" needs max_num_batched_tokens >= block_size \\(16\\), got 15',
        ),
        (
            EngineConfig(long_prefill_token_threshold=8, extra={"chunk_align": "block"}),
            'chunk_align "block" needs long_prefill_token_threshold >= block_size',
        ),
    ],
)
def test_config_errors(config, message):
    with pytest.raises(ValueError, match=message):
        ReferenceEngine(config)


def test_block_alignment_limits_apply_only_where_chunks_are_aligned():
    no_caching = EngineConfig(
        max_num_batched_tokens=15, enable_prefix_caching=False, extra={"chunk_align": "block"}
    )
    assert ReferenceEngine(no_caching).scheduler.chunk_align == "none"
    ReferenceEngine(EngineConfig(max_num_batched_tokens=16, extra={"chunk_align": "block"}))


def test_radix_page_size_equal_to_block_size_is_accepted():
    eng = ReferenceEngine(
        EngineConfig(block_manager="radix", block_size=1, extra={"page_size": "1"})
    )
    assert eng.kv_snapshot().block_size == 1


@pytest.mark.parametrize("bm", ["hashed", "radix"])
def test_token_granularity_block_size_one(bm):
    """block_size 1 (radix: page_size 1, SGLang's default): shared prefixes, exact tokens."""
    eng = engine(bm, block_size=1, num_gpu_blocks=120, max_num_batched_tokens=16)
    driver = ShadowDriver(eng, 1, 120)
    rng = np.random.default_rng(7)
    system = rng.integers(0, 50, 11)
    prompts = {}
    for i in range(12):
        prompt = np.concatenate([system[: rng.integers(0, 12)], rng.integers(0, 50, 5)])
        prompts[f"r{i}"] = prompt
        driver.add(request(f"r{i}", prompt, max_tokens=4))
    driver.run(steps_max=500)
    assert driver.read_errors == [] and not eng.has_unfinished_requests()
    for rid, prompt in prompts.items():
        assert list(driver.finished[rid].output_token_ids) == ideal_outputs(prompt, 4)


def test_scheduled_token_ids_are_readonly_views():
    eng = engine()
    eng.add_request(request("A", range(10), max_tokens=2))
    out = eng.schedule()
    token_ids = out.scheduled[0].token_ids
    assert token_ids.dtype == np.int64 and not token_ids.flags.writeable
    assert token_ids.tolist() == list(range(10))
    assert isinstance(out.scheduled[0].block_table, tuple)


def test_fast_scheduled_request_equals_the_normal_constructor():
    assert fast_output.FAST_PATH_IN_USE
    token_ids = np.arange(3)
    args = ("r", 4, 3, 9, 7, token_ids, (1, 2), 4)
    fast = fast_output.make_scheduled_request(*args)
    normal = ScheduledRequest(*args)
    for field in dataclasses.fields(ScheduledRequest):
        assert getattr(fast, field.name) is getattr(normal, field.name)
    assert fast.num_end_tokens == 7 and not fast.samples
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.num_tokens = 1  # type: ignore[misc]


def test_fcfs_queue_prepends_preempted():
    queue = FCFSQueue()
    a, b, c = (object(), object(), object())
    queue.add(a)  # type: ignore[arg-type]
    queue.add(b)  # type: ignore[arg-type]
    queue.prepend(c)  # type: ignore[arg-type]
    assert list(queue) == [c, a, b] and queue.peek() is c
    queue.remove(a)  # type: ignore[arg-type]
    assert [queue.pop(), queue.pop()] == [c, b] and len(queue) == 0


def test_priority_queue_order_is_priority_then_arrival():
    from schedcheck.engines.reference.block_hash import BlockHasher
    from schedcheck.engines.reference.request import Request

    hasher = BlockHasher(4)
    reqs = [
        Request(request(rid, [1], priority=p, arrival_time_s=t), hasher, seq)
        for seq, (rid, p, t) in enumerate(
            [("a", 1, 0.0), ("b", 0, 5.0), ("c", 1, 0.0), ("d", 0, 1.0)]
        )
    ]
    queue = make_queue("priority")
    assert isinstance(queue, PriorityQueue)
    for req in reqs:
        queue.add(req)
    assert [r.request_id for r in queue] == ["d", "b", "a", "c"]
    queue.remove(reqs[1])
    assert [queue.pop().request_id for _ in range(3)] == ["d", "a", "c"]


@pytest.mark.parametrize(
    ("mode", "args", "expected"),
    [
        ("none", (16, 32, 40, 100, 100), 40),
        ("block", (16, 32, 40, 100, 100), 32),  # ends at 64, not 72
        ("block", (16, 32, 10, 100, 100), 0),  # would end inside block 2: wait
        ("block", (16, 96, 4, 100, 100), 4),  # the final chunk is never cut
        ("deterministic", (16, 0, 100, 100, 100), 96),
        ("deterministic", (16, 96, 4, 100, 100), 4),
        ("deterministic", (16, 0, 64, 64, 64), 64),  # prompt a multiple: nothing to do
        ("deterministic", (16, 0, 101, 101, 100), 101),  # outputs exist: resumed, not cut
    ],
)
def test_align_chunk(mode, args, expected):
    assert align_chunk(mode, *args) == expected
