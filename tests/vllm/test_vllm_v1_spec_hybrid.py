"""vLLM 0.33 with scheduled drafts (n-gram speculative config) and hybrid KV-cache groups
(full + sliding window), behind the Engine protocol (tox -e vllm-v1).

Block size 4; vLLM keeps block 0 as its null block. Prompt: 10 tokens 10..19.
"""

from __future__ import annotations

import pytest
from vllm_driver import NEEDS_VLLM_V1, check_snapshot, request, skip_unless_drafts, summary

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

pytestmark = NEEDS_VLLM_V1

PROMPT = tuple(range(10, 20))


def _engine(**overrides):
    from schedcheck.engines.registry import make_engine

    base = dict(
        block_size=4, num_gpu_blocks=32, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=64
    )
    base.update(overrides)
    return make_engine("vllm-v1", EngineConfig(**base))


def test_drafts_are_scheduled_after_the_known_tokens_and_rejections_roll_back():
    """Step 2 runs the last token 1000 and drafts 7, 8 (positions 10..12); the sampler
    accepts 7 and rejects 8, so vLLM rolls num_computed_tokens back from 13 to 12 and the
    next step recomputes position 12 with the bonus token 1001."""
    skip_unless_drafts()
    engine = _engine(num_speculative_tokens=2)
    engine.add_request(request("a", PROMPT, 6))
    s1 = engine.schedule()
    assert [summary(r) for r in s1.scheduled] == [("a", 0, 10, 10, 10, list(PROMPT), (1, 2, 3), 0)]
    engine.update_from_output(s1, {"a": 1000}, {})
    engine.update_draft_token_ids({"a": (7, 8)})

    s2 = engine.schedule()
    assert [(summary(r), r.spec_token_ids) for r in s2.scheduled] == [
        (("a", 10, 3, 11, 10, [1000, 7, 8], (1, 2, 3, 4), 0), (7, 8))
    ]
    assert s2.scheduled[0].samples
    assert engine.update_from_output(s2, {"a": 1001}, {"a": (7,)}) == []
    assert dict(engine.kv_snapshot().num_computed_tokens()) == {"a": 12}
    check_snapshot(engine.kv_snapshot())

    engine.update_draft_token_ids({})  # the drafter proposes nothing: [] for a (0.11.0
    # keeps a's drafts 7, 8 until replaced, 0.11.1 on drops them once scheduled)
    s3 = engine.schedule()  # no drafts proposed after step 2: a plain decode
    assert [(summary(r), r.spec_token_ids) for r in s3.scheduled] == [
        (("a", 12, 1, 13, 10, [1001], (1, 2, 3, 4), 0), ())
    ]


def test_sliding_window_group_frees_blocks_before_the_window():
    """W = 4. Group 0 (full) gets blocks 1, 2, 3, group 1 (sliding) 4, 5, 6. Computing
    position 10 needs keys 7..10, so block 4 (keys 0..3) is freed; position 11 needs 8..11,
    so block 5 too. The runner's table still names them (vLLM's runner keeps freed ids and
    masks them); the manager's holds the null block there."""
    engine = _engine(kv_groups="full,sliding:4")
    engine.add_request(request("a", PROMPT, 4))
    freed, manager_tables = [], []
    for token in (1000, 1001, 1002):
        out = engine.schedule()
        (r,) = out.scheduled
        assert r.group_block_tables == ((1, 2, 3), (4, 5, 6))
        snap = engine.kv_snapshot()
        freed.append(snap.num_sliding_window_blocks_freed)
        manager_tables.append(list(snap.block_tables()["a"]))
        check_snapshot(snap)
        engine.update_from_output(out, {"a": token})
    assert freed == [0, 1, 2]
    assert manager_tables == [[1, 2, 3, 4, 5, 6], [1, 2, 3, 5, 6], [1, 2, 3, 6]]
    out = engine.schedule()  # position 12 opens block 7 (full) and block 8 (sliding)
    assert out.scheduled[0].group_block_tables == ((1, 2, 3, 7), (4, 5, 6, 8))


def _trace(n: int) -> list[TraceRequest]:
    """n requests sharing a 12-token prefix, 6 own tokens, 8 outputs, arriving together."""
    return [
        TraceRequest(
            request_id=f"r{i}",
            arrival_time_s=0.0,
            prompt_token_ids=(*range(100, 112), *range(200 + 10 * i, 206 + 10 * i)),
            output_length=8,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("kv_groups", "num_speculative_tokens", "async_scheduling"),
    [
        ("full", 3, False),
        ("full,sliding:5", 0, False),
        ("full,sliding:5", 3, False),
        ("full", 3, True),
        ("full,sliding:5", 3, True),
    ],
)
def test_the_simulator_runs_vllm_with_drafts_and_a_sliding_window_clean(
    kv_groups, num_speculative_tokens, async_scheduling
):
    """With async scheduling vLLM schedules each step's drafts as placeholders, after every
    draft of the step in flight; the runner moves the chunk back by those rejected."""
    if num_speculative_tokens:
        skip_unless_drafts(async_scheduling)
    config = EngineConfig(
        block_size=4,
        num_gpu_blocks=64,
        max_num_batched_tokens=32,
        max_num_seqs=8,
        max_model_len=128,
        kv_groups=kv_groups,
        num_speculative_tokens=num_speculative_tokens,
        extra={"async_scheduling": "true"} if async_scheduling else {},
    )
    result = run(_trace(6), "vllm-v1", config, SimOptions(seed=3, draft_acceptance=0.5))
    assert (result.exit_code, result.finished, result.violations) == (0, 6, [])
    if num_speculative_tokens:
        assert result.coverage["spec-rejected"] > 0
    if kv_groups != "full":
        assert result.coverage["sliding-window-block-freed"] > 0
    if async_scheduling:
        assert result.coverage["async-output-placeholder"] > 0


def test_async_drafts_after_an_empty_step_are_known_tokens_and_drafts():
    """Found by the async + spec-decode campaign (a harness false positive, fixed): step 2
    preempts r2 and runs nothing, so step 1 is applied before step 3 is scheduled; r1's
    drafts are still vLLM's placeholders, but its known tokens are all known. The adapter
    asserted a placeholder there (engine-crash); now it runs clean."""
    skip_unless_drafts(async_scheduling=True)
    trace = [
        TraceRequest("r1", 0.0, 1, prompt_token_ids=(2000,)),
        TraceRequest("r2", 0.0, 2, prompt_token_ids=(3000,)),
    ]
    config = EngineConfig(
        block_size=1, num_gpu_blocks=4, max_num_batched_tokens=8, max_num_seqs=8,
        num_speculative_tokens=1, extra={"async_scheduling": "true"},
    )  # fmt: skip
    result = run(trace, "vllm-v1", config, SimOptions(seed=0, draft_acceptance=0.7))
    assert (result.exit_code, result.finished, result.violations) == (0, 2, [])
