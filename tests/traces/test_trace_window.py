"""Windowing (--start-s, --duration-s, --max-requests) and time scaling, with exact values."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from schedcheck.traces import TraceRequest, iter_trace, write_trace
from schedcheck.traces.window import Window, apply_window

CONVERSATION = "mooncake/conversation_trace.jsonl.xz"


def test_mooncake_window_and_half_time(real_traces: Path) -> None:
    requests = list(
        iter_trace(real_traces / CONVERSATION, start_s=100, duration_s=50, time_scale=0.5)
    )
    # timestamps 100000 <= t < 150000 ms: rows 291..448, t from 102000 to 149999
    assert len(requests) == 158
    assert (requests[0].request_id, requests[-1].request_id) == ("mooncake-291", "mooncake-448")
    assert requests[0].arrival_time_s == 0.0
    assert requests[-1].arrival_time_s == pytest.approx((149.999 - 102.0) * 0.5, abs=1e-12)
    with lzma.open(real_traces / CONVERSATION, "rt") as fh:
        raw_ms = [json.loads(line)["timestamp"] for line in fh][291:449]
    for request, t_ms in zip(requests, raw_ms, strict=True):
        assert request.arrival_time_s == pytest.approx((t_ms - 102_000) / 1000 * 0.5, abs=1e-12)


def test_max_requests_after_the_window(real_traces: Path) -> None:
    requests = list(iter_trace(real_traces / CONVERSATION, start_s=100, max_requests=3))
    assert [r.request_id for r in requests] == ["mooncake-291", "mooncake-292", "mooncake-293"]
    assert [r.arrival_time_s for r in requests] == [0.0, 0.0, 0.0]
    assert len(list(iter_trace(real_traces / CONVERSATION, max_requests=0))) == 0


def test_time_scale_alone_scales_every_gap(real_traces: Path) -> None:
    full = list(iter_trace(real_traces / CONVERSATION, max_requests=500))
    doubled = list(iter_trace(real_traces / CONVERSATION, max_requests=500, time_scale=2.0))
    assert [d.arrival_time_s for d in doubled] == [f.arrival_time_s * 2.0 for f in full]
    assert doubled[-1].arrival_time_s == 330.0  # row 499 arrives at 165 000 ms


def test_azure_window_in_source_seconds(real_traces: Path) -> None:
    path = real_traces / "azure2023/AzureLLMInferenceTrace_code.csv.xz"
    requests = list(iter_trace(path, start_s=300, duration_s=60, time_scale=2))
    assert len(requests) == 130
    assert requests[0].request_id == "azure-781"
    assert requests[-1].arrival_time_s == pytest.approx(91.268168, abs=1e-9)


def test_a_parent_outside_the_window_is_cut(real_traces: Path) -> None:
    path = real_traces / "burstgpt/BurstGPT_3_first400.csv.xz"
    whole = {r.request_id: r for r in iter_trace(path)}
    assert whole["burstgpt-4"].parent_request_id == "burstgpt-0"
    window = list(iter_trace(path, start_s=1.0))
    assert window[0].request_id == "burstgpt-1"
    kept = {r.request_id: r for r in window}
    assert kept["burstgpt-4"].parent_request_id is None  # burstgpt-0 left out: history gone
    assert kept["burstgpt-4"].session_id == whole["burstgpt-4"].session_id
    links = [r for r in window if whole[r.request_id].parent_request_id not in (None, "burstgpt-0")]
    assert links and all(
        r.parent_request_id == whole[r.request_id].parent_request_id for r in links
    )


def test_abort_and_think_times_move_and_scale() -> None:
    requests = [
        TraceRequest("a", 10.0, 1, prompt_token_ids=(5,)),
        TraceRequest("b", 12.0, 1, prompt_token_ids=(5,), abort_time_s=13.0),
        TraceRequest("c", 16.0, 1, prompt_token_ids=(5,), parent_request_id="b", think_time_s=3.0),
        TraceRequest("d", 30.0, 1, prompt_token_ids=(5,)),
    ]
    # source offsets 0, 2, 6, 20; the window [1, 11) keeps b and c, b arrives at 0
    kept = list(apply_window(requests, Window(start_s=1.0, duration_s=10.0, time_scale=0.5)))
    assert kept == [
        TraceRequest("b", 0.0, 1, prompt_token_ids=(5,), abort_time_s=0.5),
        TraceRequest("c", 2.0, 1, prompt_token_ids=(5,), parent_request_id="b", think_time_s=1.5),
    ]


def test_reading_stops_at_the_window_end(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = [TraceRequest(f"r{i}", float(i), 1, prompt_token_ids=(5,)) for i in range(5)]
    write_trace(path, good)
    with open(path, "a") as fh:
        fh.write("not json\n")
    # r4 (offset 4.0) ends the window [0, 3.5): the bad line after it is never read
    assert [r.request_id for r in iter_trace(path, duration_s=3.5)] == ["r0", "r1", "r2", "r3"]
    assert [r.request_id for r in iter_trace(path, max_requests=5)] == [r.request_id for r in good]
