"""SGLang's mixed chunked prefill (`--enable-mixed-chunk`, EngineConfig.extra
"enable_mixed_chunk"): with chunked prefill on, a prefill batch and the running decodes run
as one forward (`ForwardMode.MIXED`, `ScheduleBatch.mix_with_running`); its PrefillAdder
takes the running batch's size off the budget first (`num_mixed_decode_tokens`).

Exact chunks, read from SGLang's own batches: (id, num_computed, num_scheduled, num_tokens,
the slots the chunk writes, its token ids). Made-up hash-model tokens: a's outputs are
21126, 14992, 4009, ... (the symbolic executor's, a function of what a read).
"""

from __future__ import annotations

import pytest
from sglang_driver import SGLANG_0_5_23, Driver, config, request

from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID as P
from schedcheck.engines.protocol import SchedulerOutput

pytestmark = SGLANG_0_5_23

MIXED = {"enable_mixed_chunk": "true"}


def rows(output: SchedulerOutput) -> list[tuple]:
    return [
        (
            r.request_id,
            r.num_computed_tokens,
            r.num_scheduled_tokens,
            r.num_tokens,
            r.slots[r.num_computed_tokens : r.num_end_tokens],
            tuple(r.token_ids.tolist()),
        )
        for r in output.scheduled
    ]


def test_the_option_is_parsed_and_sets_sglangs_flag_where_chunked_prefill_is_on():
    from schedcheck.engines.registry import make_engine
    from schedcheck.engines.sglang.build import SglangOptions

    assert SglangOptions.from_extra({}).mixed_chunk is False
    assert SglangOptions.from_extra({"enable_mixed_chunk": "false"}).mixed_chunk is False
    assert SglangOptions.from_extra(MIXED).mixed_chunk is True
    with pytest.raises(AssertionError, match="enable_mixed_chunk 'yes'"):
        SglangOptions.from_extra({"enable_mixed_chunk": "yes"})
    on = make_engine("sglang", config(extra=MIXED)).scheduler
    assert (on.is_mixed_chunk, on.server_args.enable_mixed_chunk) == (True, True)
    assert make_engine("sglang", config()).scheduler.is_mixed_chunk is False
    no_chunks = config(extra=MIXED, enable_chunked_prefill=False, max_model_len=16)
    assert make_engine("sglang", no_chunks).scheduler.is_mixed_chunk is False  # as SGLang


def test_the_fitter_pins_the_option_and_chunked_prefill_for_a_campaign(monkeypatch):
    from schedcheck.engines.sglang.fit import MIXED_CHUNK_ENV, fit_config

    monkeypatch.setenv(MIXED_CHUNK_ENV, "on")
    assert fit_config(config()).extra["enable_mixed_chunk"] == "true"
    monkeypatch.setenv(MIXED_CHUNK_ENV, "off")
    assert fit_config(config(extra=MIXED)).extra["enable_mixed_chunk"] == "false"
    monkeypatch.delenv(MIXED_CHUNK_ENV)
    assert "enable_mixed_chunk" not in fit_config(config()).extra
    drawn_off = config(enable_chunked_prefill=False, enable_prefix_caching=True)
    assert fit_config(drawn_off).max_model_len == 16  # the budget (F2's cap), as drawn
    monkeypatch.setenv("SCHEDCHECK_SGLANG_CHUNKED_PREFILL", "on")
    monkeypatch.setenv("SCHEDCHECK_SGLANG_PREFIX_CACHING", "off")
    fitted = fit_config(drawn_off)
    assert (fitted.enable_chunked_prefill, fitted.enable_prefix_caching) == (True, False)
    assert fitted.max_model_len == 48  # not capped: chunked prefill is on


def test_a_chunked_prefill_runs_with_the_decode_in_one_step_and_ends_mid_page():
    """Page 4, budget 8. Step 1 admits a (3 tokens, charged a page) and b's first chunk (4).
    From step 2 a decodes inside b's batch: the adder keeps 1 token of the 8 for it, so b's
    continuation runs 7 tokens (add_chunked_req does not round it to a page: 4..11, 11..18
    end mid-page), then a decode row (1 token at seq_len - 1, its last output). The chunks'
    slots are out_cache_loc: b's then a's. Mixed off, b runs 8 + 8 and a waits."""
    d = Driver(config(block_size=4, num_gpu_blocks=16, max_num_batched_tokens=8, extra=MIXED))
    d.add(request("a", [1, 2, 3], 6))
    d.add(request("b", range(10, 30), 2))
    steps = [rows(d.step()) for _ in range(6)]
    assert steps == [
        [("a", 0, 3, 3, (4, 5, 6), (1, 2, 3)), ("b", 0, 4, 20, (8, 9, 10, 11), (10, 11, 12, 13))],
        [
            ("b", 4, 7, 20, (12, 13, 14, 15, 16, 17, 18), tuple(range(14, 21))),
            ("a", 3, 1, 4, (7,), (21126,)),
        ],
        [
            ("b", 11, 7, 20, (19, 20, 21, 22, 23, 24, 25), tuple(range(21, 28))),
            ("a", 4, 1, 5, (28,), (14992,)),
        ],
        [("b", 18, 2, 20, (26, 27), (28, 29)), ("a", 5, 1, 6, (29,), (4009,))],
        [("b", 20, 1, 21, (32,), (2402,)), ("a", 6, 1, 7, (30,), (12717,))],
        [("a", 7, 1, 8, (31,), (27073,))],
    ]
    assert d.engine.rare_path_counts()["mixed-chunk-step"] == 3
    d.run()
    assert d.violations == []
    assert d.finished["a"].output_token_ids == (21126, 14992, 4009, 12717, 27073, 16344)
    assert d.finished["b"].output_token_ids == (2402, 28061)
    off = Driver(config(block_size=4, num_gpu_blocks=16, max_num_batched_tokens=8))
    off.add(request("a", [1, 2, 3], 6))
    off.add(request("b", range(10, 30), 2))
    off.step()
    assert rows(off.step()) == [("b", 4, 8, 20, tuple(range(12, 20)), tuple(range(14, 22)))]


def test_a_decode_that_finishes_in_a_mixed_step_is_released_by_sglangs_prefill_result():
    """a's last token is sampled in the mixed step (process_batch_result_prefill's
    `decoding_reqs` branch: release_kv_cache); b's new prefill is cut to a page (7 -> 4)."""
    d = Driver(config(block_size=4, num_gpu_blocks=16, max_num_batched_tokens=8, extra=MIXED))
    d.add(request("a", [1, 2, 3], 2))
    assert rows(d.step()) == [("a", 0, 3, 3, (4, 5, 6), (1, 2, 3))]
    d.add(request("b", range(10, 30), 2))
    assert rows(d.step()) == [
        ("b", 0, 4, 20, (8, 9, 10, 11), (10, 11, 12, 13)),
        ("a", 3, 1, 4, (7,), (21126,)),
    ]
    assert d.finished["a"].output_token_ids == (21126, 14992)
    assert d.finished["a"].reason == "length"
    d.run()
    assert d.violations == []
    assert d.engine.rare_path_counts()["mixed-chunk-step"] == 1


def test_under_overlap_a_mixed_decode_row_reads_its_token_in_flight():
    """Overlap on: the decode row of a mixed batch runs a's token still in flight (the
    future map: a placeholder the runner fills in), as a decode batch's row does."""
    from schedcheck.engines.registry import make_engine

    e = make_engine(
        "sglang",
        config(max_num_batched_tokens=8, extra={**MIXED, "async_scheduling": "true"}),
    )
    e.add_request(request("a", [1, 2, 3], 4))
    o1 = e.schedule()
    e.add_request(request("b", range(10, 30), 2))
    o2 = e.schedule()
    assert rows(o1) == [("a", 0, 3, 3, (1, 2, 3), (1, 2, 3))]
    assert rows(o2) == [
        ("b", 0, 7, 20, (4, 5, 6, 7, 8, 9, 10), tuple(range(10, 17))),
        ("a", 3, 1, 4, (11,), (P,)),
    ]
    e.update_from_output(o1, {"a": 11})
    o3 = e.schedule()
    assert rows(o3) == [
        ("b", 7, 7, 20, (12, 13, 14, 15, 16, 17, 18), tuple(range(17, 24))),
        ("a", 4, 1, 5, (19,), (P,)),
    ]
    e.update_from_output(o2, {"a": 12})
    assert e.rare_path_counts()["mixed-chunk-step"] == 2


@pytest.mark.parametrize(
    "page, radix, overlap",
    [(1, False, False), (1, True, True), (16, True, False), (16, False, True)],
)
def test_a_trace_replays_clean_with_mixed_steps_and_the_outputs_of_the_normal_loop(
    page, radix, overlap
):
    """The same trace through the simulator with every invariant, mixed chunks on and off
    (page sizes 1 and 16, the radix cache and overlap scheduling on and off): clean both
    ways, the same outputs, mixed steps only with the option on."""
    from schedcheck.sim.loop import run
    from schedcheck.traces.schema import TraceRequest

    trace = [
        TraceRequest(
            f"r{i}",
            0.01 * i,
            3 + i % 5,
            input_length=20 + 6 * i,
            hash_ids=(1, 2 + i % 3, 10 + i, 20 + i, 30 + i),  # a shared first block
            hash_block_size=16,
        )
        for i in range(10)
    ]
    cfg = dict(
        block_size=page,
        num_gpu_blocks=512 // page,
        max_num_batched_tokens=32,
        max_num_seqs=8,
        max_model_len=128,
        enable_prefix_caching=radix,
    )
    results = {
        mixed: run(
            trace,
            "sglang",
            config(
                **cfg, extra={"enable_mixed_chunk": mixed, "async_scheduling": str(overlap).lower()}
            ),
        )
        for mixed in ("true", "false")
    }
    on, off = results["true"], results["false"]
    assert on.violations == off.violations == []
    assert dict(on.outputs) == dict(off.outputs) and len(on.outputs) == 10
    assert on.coverage["mixed-chunk-step"] > 0 == off.coverage["mixed-chunk-step"]
    assert on.fingerprint != off.fingerprint


def test_the_decode_rows_are_taken_off_the_budget_before_the_chunk():
    """Budget 4 (page 1): three running decodes leave the chunked prefill 1 token a step
    (PrefillAdder's num_mixed_decode_tokens: rem_chunk_tokens 4 - 3), so each mixed step
    runs exactly the budget, the protocol's max_num_batched_tokens."""
    budget = dict(max_num_batched_tokens=4, max_num_seqs=4)
    d = Driver(config(num_gpu_blocks=256, max_model_len=64, extra=MIXED, **budget))
    for rid, token in (("a", 1), ("b", 2), ("c", 3)):
        d.add(request(rid, [token], 20))
    d.add(request("long", range(100, 130), 2))
    first = d.step()
    assert [
        (r.request_id, r.num_computed_tokens, r.num_scheduled_tokens) for r in first.scheduled
    ] == [
        ("a", 0, 1),
        ("b", 0, 1),
        ("c", 0, 1),
        ("long", 0, 1),
    ]
    for step in range(1, 6):  # bounded
        out = d.step()
        assert [
            (r.request_id, r.num_computed_tokens, r.num_scheduled_tokens) for r in out.scheduled
        ] == [
            ("long", step, 1),
            ("a", step, 1),
            ("b", step, 1),
            ("c", step, 1),
        ]
    assert d.violations == []
