"""A request waiting in the reference engine's queue costs its prompt, compact, and O(1) more:
no int64 buffer and no block hash until the scheduler first considers it (issue #30: a trace
that outruns the engine leaves thousands waiting). Building them late changes no decision."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from refengine_helpers import engine, request, step

from schedcheck.engines.reference.block_hash import BlockHasher
from schedcheck.engines.reference.request import Request, compact_tokens


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False
    return values


def test_compact_tokens_takes_the_narrowest_exact_dtype():
    small = _read_only(np.array([3, 31_999, 65_535], dtype=np.int64))
    assert compact_tokens(small).dtype == np.uint16
    assert compact_tokens(_read_only(np.array([3, 65_536]))).dtype == np.int32
    assert compact_tokens(_read_only(np.array([-1, 7]))).dtype == np.int32
    for prompt in (small, _read_only(np.array([-1, 7])), _read_only(np.array([3, 65_536]))):
        assert compact_tokens(prompt).tolist() == prompt.tolist()


def test_compact_tokens_keeps_a_wide_read_only_prompt_and_copies_a_writable_one():
    wide = _read_only(np.array([0, 1 << 40], dtype=np.int64))
    assert compact_tokens(wide) is wide  # a view of what it was handed: no copy
    writable = np.array([0, 1 << 40], dtype=np.int64)
    kept = compact_tokens(writable)
    assert kept is not writable and kept.dtype == np.int64
    writable[0] = 5  # the caller changes its array: the request's prompt does not change
    assert kept.tolist() == [0, 1 << 40]


def test_a_request_builds_its_buffer_and_hashes_on_first_use_with_the_same_values():
    prompt = list(range(3, 3 + 10))
    lazy = Request(request("r", prompt, max_tokens=3), BlockHasher(4), arrival_seq=0)
    assert not lazy.tokens_built and lazy._block_hashes == []
    assert lazy.readonly_tokens.size == 0
    assert lazy.all_token_ids.tolist() == prompt  # an accessor builds it
    assert lazy.tokens_built and lazy.readonly_tokens.dtype == np.int64
    assert lazy.readonly_tokens.size == 13 and not lazy.readonly_tokens.flags.writeable
    eager = Request(request("r", prompt, max_tokens=3), BlockHasher(4), arrival_seq=0)
    eager.append_output_token(99)  # an output before any read also builds it
    assert eager.all_token_ids.tolist() == [*prompt, 99]
    direct: list[bytes] = []  # what add_request hashed before issue #30, from the int64 prompt
    as_int64 = np.asarray(prompt, dtype=np.int64)
    BlockHasher(4).extend(direct, memoryview(as_int64.data).cast("B"), 10, b"")
    assert lazy.block_hashes == direct and len(direct) == 2


@pytest.mark.parametrize("prefix_caching", [True, False])
@pytest.mark.parametrize("block_manager", ["hashed", "radix"])
def test_waiting_requests_stay_compact_until_the_scheduler_considers_them(
    block_manager, prefix_caching
):
    eng = engine(block_manager, enable_prefix_caching=prefix_caching, max_num_seqs=1)
    for i in range(4):
        eng.add_request(request(f"r{i}", [3 + i, *range(10, 30)], max_tokens=2))
    requests = eng.scheduler.requests
    assert not any(r.tokens_built or r._block_hashes for r in requests.values())
    output, _ = step(eng)
    (scheduled,) = output.scheduled
    assert scheduled.token_ids.tolist() == [3, *range(10, 30)]
    # the head was admitted; max_num_seqs stops the queue before the rest are considered
    assert [rid for rid, r in requests.items() if r.tokens_built] == ["r0"]


def test_a_waiting_request_costs_its_prompt_in_uint16_and_o1_more():
    eng = engine(num_gpu_blocks=4_096, max_model_len=1 << 14)
    num_requests, num_tokens = 64, 4_096
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 32_000, num_tokens) for _ in range(num_requests)]
    eng.add_request(request("warm-up", prompts[0], max_tokens=8))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, prompt in enumerate(prompts):
            eng.add_request(request(f"r{i}", prompt, max_tokens=512))
        per_request = (tracemalloc.get_traced_memory()[0] - before) / num_requests
    finally:
        tracemalloc.stop()
    # 2 bytes a token (uint16) + the Request and its queue entry; before issue #30 it was
    # 8 * (prompt + max_tokens) + a 32-byte hash per block: about 42 KB here
    assert per_request < 2 * num_tokens + 2_048, per_request
