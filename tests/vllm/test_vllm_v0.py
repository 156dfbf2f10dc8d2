"""vLLM v0's real Scheduler + block manager v1/v2 behind the Engine protocol
(tox -e vllm-v0.5.4, tox -e vllm-v0.6.0; each runs the cases of its installed version).

Block size 4, block ids from 0 (no null block in v0). 0.6.0 runs chunked prefill with a
budget of 8; 0.5.4 runs without it (budget 64), because its model runner refuses a prefix
hit under chunked prefill (test_v054_runner_refuses_prefix_hits_under_chunked_prefill).
Every scheduled request is also checked against the real runner methods of the installed
version (`_compute_lens`, `_compute_for_prefix_cache_hit`), see `_real_runner`.
Stand-in tokens: 1000 + 10 * step + sum of the id's bytes ("a" +97, "b" +98, "c" +99).
"""

from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace

import pytest
from vllm_driver import check_snapshot, request, run_step, summary

from schedcheck.engines.protocol import EngineConfig, FinishedRequest


def _vllm_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


VERSION = _vllm_version()
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        VERSION not in ("0.5.4", "0.6.0"), reason="needs vllm 0.5.4 or 0.6.0 (tox -e vllm-v0.*)"
    ),
]
CHUNKED = VERSION == "0.6.0"
PROMPT = tuple(range(10, 20))  # 10 tokens: blocks [10..13][14..17][18 19 . .]


def _engine(block_manager: str, **overrides):
    from schedcheck.engines.registry import make_engine

    base = dict(
        block_size=4,
        num_gpu_blocks=16,
        max_num_batched_tokens=8 if CHUNKED else 64,
        max_num_seqs=4,
        max_model_len=64,
        block_manager=block_manager,
        enable_chunked_prefill=CHUNKED,
    )
    base.update(overrides)
    return make_engine("vllm-v0", EngineConfig(**base))


@pytest.fixture(autouse=True)
def _real_runner(monkeypatch):
    """Check every ScheduledRequest against the installed vLLM's own runner methods."""
    if VERSION not in ("0.5.4", "0.6.0"):
        return
    from schedcheck.engines.vllm.v0.adapter import VllmV0Engine

    mapped = VllmV0Engine._scheduled_request

    def checked(self, meta, group):
        ours = mapped(self, meta, group)
        context, seq_len, query, positions, tokens = _vllm_runner_view(
            meta, self.config.block_size, self._chunked
        )
        assert (ours.num_computed_tokens, ours.num_scheduled_tokens) == (context, query)
        assert ours.num_end_tokens == seq_len
        assert positions == list(range(context, seq_len)), "runner positions not contiguous"
        assert ours.token_ids.tolist() == tokens
        return ours

    monkeypatch.setattr(VllmV0Engine, "_scheduled_request", checked)


def _vllm_runner_view(meta, block_size: int, chunked: bool):
    """context_len, seq_len, query_len, positions, tokens from vLLM's ModelInputForGPUBuilder."""
    from vllm.worker.model_runner import ModelInputForGPUBuilder as Builder

    stub = SimpleNamespace(
        sliding_window=None, chunked_prefill_enabled=chunked, block_size=block_size
    )
    (seq_id,) = list(meta.seq_data)
    inter = Builder.InterDataForSeqGroup(
        request_id=meta.request_id,
        seq_ids=[seq_id],
        is_prompt=meta.is_prompt,
        block_tables=meta.block_tables,
        computed_block_nums=meta.computed_block_nums,
    )
    Builder._compute_lens(stub, inter, 0, meta)
    Builder._compute_for_prefix_cache_hit(stub, inter, 0, meta)
    tokens = inter.input_tokens[0]
    return (
        inter.context_lens[0],
        inter.seq_lens[0],
        inter.query_lens[0],
        list(inter.input_positions[0]),
        list(tokens) if isinstance(tokens, list) else [tokens],
    )


# Per (version, block manager): the shared-prefix steps as (summaries, block_copies).
# a at step 1, b (same 10-token prompt) at step 2, max_tokens 2 each.
A_FULL = ("a", 0, 10, 10, 10, list(PROMPT), (0, 1, 2), 0)
A_CHUNK1 = ("a", 0, 8, 10, 10, list(PROMPT[:8]), (0, 1, 2), 0)
SHARED = {
    ("0.5.4", "v1"): [
        ([A_FULL], ()),
        # bm v1 marked only block 0 computed (full blocks but the last full one)
        ([("b", 4, 6, 10, 10, list(PROMPT[4:]), (0, 1, 2), 4)], ()),
        # b shares a's partial block 2: a's append copies it to block 3 (copy-on-write)
        (
            [
                ("a", 10, 1, 11, 10, [1107], (0, 1, 3), 0),
                ("b", 10, 1, 11, 10, [1118], (0, 1, 2), 0),
            ],
            ((2, 3),),
        ),
    ],
    ("0.5.4", "v2"): [
        ([A_FULL], ()),
        # 0.5.4 bm v2 offers only evictable blocks as computed: b recomputes all of it
        ([("b", 0, 10, 10, 10, list(PROMPT), (0, 1, 3), 0)], ()),
        (
            [
                ("a", 10, 1, 11, 10, [1107], (0, 1, 2), 0),
                ("b", 10, 1, 11, 10, [1118], (0, 1, 3), 0),
            ],
            (),
        ),
    ],
    ("0.6.0", "v1"): [
        ([A_CHUNK1], ()),
        # b's chunk 0..4 lies inside the computed block 0: the runner computes its last token
        (
            [("b", 3, 1, 10, 10, [13], (0, 1, 2), 3), ("a", 8, 2, 10, 10, [18, 19], (0, 1, 2), 0)],
            (),
        ),
        # b's chunk 4..10 starts inside the hit (blocks 0, 1): context moves to 8
        (
            [
                ("b", 8, 2, 10, 10, [18, 19], (0, 1, 2), 8),
                ("a", 10, 1, 11, 10, [1117], (0, 1, 3), 0),
            ],
            ((2, 3),),
        ),
    ],
    ("0.6.0", "v2"): [
        ([A_CHUNK1], ()),
        (
            [("b", 3, 1, 10, 10, [13], (0, 1, 3), 3), ("a", 8, 2, 10, 10, [18, 19], (0, 1, 2), 0)],
            (),
        ),
        (
            [
                ("b", 8, 2, 10, 10, [18, 19], (0, 1, 3), 8),
                ("a", 10, 1, 11, 10, [1117], (0, 1, 2), 0),
            ],
            (),
        ),
    ],
}


@pytest.mark.parametrize("block_manager", ["v1", "v2"])
def test_registry_builds_the_real_scheduler(block_manager):
    engine = _engine(block_manager)
    assert engine.version == VERSION
    manager = type(engine.scheduler.block_manager).__name__
    assert manager == {"v1": "BlockSpaceManagerV1", "v2": "BlockSpaceManagerV2"}[block_manager]
    snap = engine.kv_snapshot()
    assert snap.num_blocks == 16 and snap.reserved_block_ids == ()
    assert snap.ref_cnt().tolist() == [0] * 16
    assert sorted(snap.free_block_ids()) == list(range(16))
    check_snapshot(snap)


def test_default_block_manager_is_vllms_default():
    engine = _engine(EngineConfig().block_manager)
    assert type(engine.scheduler.block_manager).__name__ == "BlockSpaceManagerV1"
    with pytest.raises(ValueError, match="block_manager"):
        _engine("radix")


@pytest.mark.parametrize("block_manager", ["v1", "v2"])
def test_shared_prefix(block_manager):
    engine = _engine(block_manager)
    engine.add_request(request("a", PROMPT, 2))
    records = []
    for step in range(1, 4):
        if step == 2:
            engine.add_request(request("b", PROMPT, 2))
        records.append(run_step(engine))
    got = [([summary(r) for r in s.output.scheduled], s.output.block_copies) for s in records]
    assert got == SHARED[(VERSION, block_manager)]
    a_outputs = (1117, 1127) if CHUNKED else (1107, 1127)  # a's prompt ends at step 2 | 1
    assert FinishedRequest("a", a_outputs, "length") in records[2].finished


# (version, block manager) -> per step: (preempted ids, [(id, computed, scheduled, num_tokens)])
PREEMPT_V054_V1 = [
    ((), [("a", 0, 8, 8), ("b", 0, 8, 8)]),
    ((), [("a", 8, 1, 9), ("b", 8, 1, 9)]),
    (("b",), [("a", 9, 1, 10)]),
    ((), [("b", 4, 6, 10)]),  # re-prefill of prompt + 2 outputs; bm v1: hit 4
    (("b",), [("a", 10, 1, 11)]),
]
PREEMPT_V054_V2 = [
    *PREEMPT_V054_V1[:3],
    ((), [("b", 8, 2, 10)]),  # bm v2: the freed prompt blocks are computed, hit 8
    (("b",), [("a", 10, 1, 11)]),
]
PREEMPT_V060 = [
    *PREEMPT_V054_V1[:3],
    ((), [("b", 8, 2, 10), ("a", 10, 1, 11)]),  # chunked prefill: decode beside re-prefill
    (("b",), [("a", 11, 1, 12)]),
    ((), [("a", 12, 1, 13)]),
    ((), [("b", 8, 3, 11)]),
]
PREEMPT = {
    ("0.5.4", "v1"): PREEMPT_V054_V1,
    ("0.5.4", "v2"): PREEMPT_V054_V2,
    ("0.6.0", "v1"): PREEMPT_V060,
    ("0.6.0", "v2"): PREEMPT_V060,
}


@pytest.mark.parametrize("block_manager", ["v1", "v2"])
def test_preemption_under_a_tiny_pool(block_manager):
    """6 blocks, two 8-token prompts growing to 14 tokens: b is preempted (recompute) and
    re-prefilled with its prompt and the outputs it had emitted."""
    engine = _engine(block_manager, num_gpu_blocks=6, max_num_batched_tokens=16 if CHUNKED else 64)
    engine.add_request(request("a", range(100, 108), 6))
    engine.add_request(request("b", range(200, 208), 6))
    expected = PREEMPT[(VERSION, block_manager)]
    records = [run_step(engine) for _ in expected]
    got = [
        (s.output.preempted_req_ids, [summary(r)[:4] for r in s.output.scheduled]) for s in records
    ]
    assert got == expected
    reprefill = records[3].output.scheduled[0]
    assert reprefill.token_ids.tolist()[-2:] == [1108, 1118]  # b's outputs, recomputed
    while engine.has_unfinished_requests():
        records.append(run_step(engine))
        assert len(records) < 40
    finished = {f.request_id: f for s in records for f in s.finished}
    assert sorted(finished) == ["a", "b"]
    assert all(len(f.output_token_ids) == 6 and f.reason == "length" for f in finished.values())


@pytest.mark.parametrize("block_manager", ["v1", "v2"])
def test_abort_then_same_prefix(block_manager):
    """a (20 tokens, 4 outputs) is aborted at step 3 (0.6.0: after two prefill chunks, i.e.
    mid-prefill; 0.5.4: while decoding); c with the same prompt then hits 16 tokens."""
    engine = _engine(block_manager)
    engine.add_request(request("a", range(30, 50), 4))
    records = [run_step(engine), run_step(engine)]
    assert summary(records[1].output.scheduled[0])[:3] == (("a", 8, 8) if CHUNKED else ("a", 20, 1))
    engine.abort_request("a")
    engine.abort_request("a")  # already finished: ignored
    s3 = run_step(engine)
    outputs = () if CHUNKED else (1107, 1117)
    assert s3.output.scheduled == () and s3.finished == []  # no update call: next step
    aborted = FinishedRequest("a", outputs, "abort")
    snap = engine.kv_snapshot()
    assert dict(snap.block_tables()) == {} and snap.ref_cnt().sum() == 0

    engine.add_request(request("c", range(30, 50), 1))
    s4 = run_step(engine)
    assert s4.output.finished_req_ids == ("a",)  # reported with the next non-empty batch
    if CHUNKED:  # chunk 0..8 lies inside the 16 computed tokens: only its last token runs
        assert [summary(r) for r in s4.output.scheduled] == [
            ("c", 7, 1, 20, 20, [37], (0, 1, 2, 3, 4), 7)
        ]
        assert s4.finished == [aborted]
        s5, s6 = run_step(engine), run_step(engine)
        assert summary(s5.output.scheduled[0])[:3] == ("c", 15, 1)
        assert [summary(r) for r in s6.output.scheduled] == [
            ("c", 16, 4, 20, 20, [46, 47, 48, 49], (0, 1, 2, 3, 4), 0)
        ]
        assert s6.finished == [FinishedRequest("c", (1159,), "length")]
    else:
        assert [summary(r) for r in s4.output.scheduled] == [
            ("c", 16, 4, 20, 20, [46, 47, 48, 49], (0, 1, 2, 3, 4), 16)
        ]
        assert s4.finished == [aborted, FinishedRequest("c", (1139,), "length")]


def test_bm_v2_marks_every_touched_block_computed():
    """0.6.0 bm v2 marks all blocks allocated at admission computed after the first chunk,
    though only 8 of 20 tokens were written: the snapshot reports them as cached, which the
    block-pool invariant flags (bug classes 3 and 4, docs/bug-classes.md). bm v1 marks only what
    was computed."""
    if VERSION != "0.6.0":
        pytest.skip("0.6.0 chunked prefill")
    cached = {}
    for block_manager in ("v1", "v2"):
        engine = _engine(block_manager)
        engine.add_request(request("a", range(30, 50), 1))
        run_step(engine)
        cached[block_manager] = sorted(engine.kv_snapshot().cached_blocks())
    assert cached == {"v1": [0, 1], "v2": [0, 1, 2, 3, 4]}


def test_v054_runner_refuses_prefix_hits_under_chunked_prefill():
    """0.5.4's runner raises on a prefix hit with chunked prefill (model_runner.py L369-371);
    the adapter lets it out of schedule(), where the simulator records an engine crash."""
    if VERSION != "0.5.4":
        pytest.skip("0.5.4 only")
    engine = _engine("v1", enable_chunked_prefill=True, max_num_batched_tokens=8)
    engine.add_request(request("a", PROMPT, 1))
    run_step(engine)  # chunk 0..8; bm v1 then marks block 0 computed
    with pytest.raises(RuntimeError, match="chunked prefill cannot be used with prefix caching"):
        engine.schedule()


def test_exception_inside_vllm_surfaces():
    """0.6.0 refuses a chunk budget that is not a multiple of block_size under prefix caching
    (scheduler.py `_get_num_new_tokens`); 0.5.4 gets a patched failure of its own allocator."""
    if VERSION == "0.6.0":
        engine = _engine("v2", max_num_batched_tokens=10)
        engine.add_request(request("a", range(30, 50), 1))
        with pytest.raises(ValueError, match="must be dividable by block size"):
            engine.schedule()
        return
    engine = _engine("v1")
    engine.add_request(request("a", PROMPT, 1))

    def boom(*args, **kwargs):
        raise ValueError("boom inside vLLM")

    engine.scheduler.block_manager.allocate = boom
    with pytest.raises(ValueError, match="boom inside vLLM"):
        engine.schedule()


@pytest.mark.parametrize("block_manager", ["v1", "v2"])
def test_evictions_of_cached_blocks_are_counted(block_manager):
    """2 blocks: a's two cached blocks are both reused (evicted) by b's different prompt."""
    engine = _engine(block_manager, num_gpu_blocks=2)
    engine.add_request(request("a", range(30, 38), 1))
    while engine.has_unfinished_requests():
        run_step(engine)
    assert engine.kv_snapshot().num_evicted_blocks == 0
    engine.add_request(request("b", range(60, 68), 1))
    run_step(engine)
    assert engine.kv_snapshot().num_evicted_blocks == 2


def test_the_fuzzer_never_draws_what_the_version_refuses():
    from schedcheck.engines.registry import fit_config

    config = EngineConfig(block_size=16, max_num_batched_tokens=33, max_num_seqs=4)
    fitted = fit_config("vllm-v0", config)
    assert fitted.enable_chunked_prefill == (VERSION != "0.5.4")
    if VERSION == "0.5.4":  # chunked prefill off: max_model_len is the budget
        assert (fitted.max_num_batched_tokens, fitted.max_model_len) == (33, 33)
    else:  # a multiple of the block size
        assert (fitted.max_num_batched_tokens, fitted.max_model_len) == (48, 131_072)


def test_a_cache_salt_is_refused():
    import dataclasses

    engine = _engine("v1")
    salted = dataclasses.replace(request("a", range(8), 1), cache_salt="tenant-a")
    with pytest.raises(ValueError, match="no cache_salt"):
        engine.add_request(salted)


@pytest.mark.parametrize("block_manager", ["v1", "v2"])
def test_a_request_filling_the_cache_exactly_is_preempted_forever(block_manager):
    """1 block of 4; prompt 1 token + 2 outputs need 3 slots. v0's can_append_slots (both
    managers: "assume each touched block will require a new allocation") wants a free
    block for the decode although block 0 has room, so it preempts; the recompute, one
    token per step (budget 1), decodes again: a livelock (hence the adapter's declared
    spare_blocks, engines/vllm/v0/factory.py)."""
    engine = _engine(
        block_manager,
        num_gpu_blocks=1,
        max_num_batched_tokens=1,
        max_num_seqs=1,
        enable_chunked_prefill=True,
        enable_prefix_caching=False,
    )
    engine.add_request(request("r0", [1000], 2))
    steps = [run_step(engine) for _ in range(12)]
    assert [s.output.step for s in steps if s.output.preempted_req_ids == ("r0",)] == [
        2,
        4,
        6,
        8,
        10,
        12,
    ]
    assert all(summary(s.output.scheduled[0])[:3] == ("r0", 0, 1) for s in steps[::2])
    assert engine.has_unfinished_requests() and not any(s.finished for s in steps)
