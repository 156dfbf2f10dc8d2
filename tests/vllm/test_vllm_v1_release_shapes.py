"""A vLLM the adapter does not know, and a vLLM whose state breaks the adapter's mapping.

- A release newer than the newest known one is tried after one warning line on standard
  error; where it lacks what the adapter reads (a field renamed, faked here), the run is
  refused naming the field and the releases the shim was written for: exit 2, never a
  finding (issue #28).
- vLLM's own num_computed_tokens advanced one token too far (faked by patching its
  `_update_after_schedule`) is a violation naming both counts, not an engine-crash (issue
  #27 item 2: it was the adapter's `assert request.num_computed_tokens == end`).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from vllm_driver import NEEDS_VLLM_V1

from schedcheck.cli.entry import main
from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.vllm.v1 import eras, factory, shapes
from schedcheck.sim import loop
from schedcheck.traces import TraceRequest

pytestmark = NEEDS_VLLM_V1

NEWER = "0.99.0"
WARNING = "schedcheck: warning: vLLM 0.99.0 is newer than the releases the vllm-v1 adapter knows"
TRACE_LINES = (  # r1 shares r0's first block
    {"request_id": "r0", "arrival_time_s": 0.0, "prompt_token_ids": [1, 2, 3, 4, 5, 6],
     "output_length": 3},
    {"request_id": "r1", "arrival_time_s": 0.001, "prompt_token_ids": [1, 2, 3, 4, 9],
     "output_length": 2},
)  # fmt: skip
FLAGS = ("--block-size", "4", "--num-gpu-blocks", "32", "--max-num-batched-tokens", "8",
         "--max-num-seqs", "4", "--max-model-len", "64", "--cost-profile", "unit")  # fmt: skip


@pytest.fixture
def newer_release(monkeypatch):
    """The installed vLLM reads as 0.99.0; the warning not yet given in this process."""
    monkeypatch.setattr(eras, "installed_release", lambda: NEWER)
    monkeypatch.setenv(factory.NEWER_WARNED_ENV, "")


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in TRACE_LINES))
    return str(path)


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("schedcheck: warning:")]


def test_a_newer_release_is_tried_after_one_warning_line(newer_release, trace, capsys):
    code = main(["replay", trace, "--engine", "vllm-v1", *FLAGS, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["violations"] == []
    [warning] = _warnings(captured.err)
    assert warning.startswith(WARNING)
    assert code == main(["replay", trace, "--engine", "vllm-v1", *FLAGS])  # same process
    assert _warnings(capsys.readouterr().err) == []  # said once


def _renamed(cls: type, old: str, new: str) -> type:
    """A dataclass with the init fields of `cls` (names and types only), `old` renamed to
    `new`. (Handing make_dataclass the real Field objects would rename them in `cls`.)"""
    fields = [(new if f.name == old else f.name, f.type) for f in dataclasses.fields(cls) if f.init]
    return dataclasses.make_dataclass(cls.__name__, fields)


@pytest.fixture
def renamed_field(monkeypatch):
    """CachedRequestData.num_computed_tokens renamed, as a later release might."""
    from vllm.v1.core.sched import output

    fake = _renamed(output.CachedRequestData, "num_computed_tokens", "computed_token_counts")
    monkeypatch.setattr(output, "CachedRequestData", fake)


EXPECTED_REFUSAL = (
    "vLLM 0.99.0 changed what the vllm-v1 adapter reads: CachedRequestData has no "
    "num_computed_tokens (read in 0.10.1.1 to 0.34.0)"
)


def test_a_renamed_field_is_exit_2_naming_it(newer_release, renamed_field, trace, capsys):
    code = main(["replay", trace, "--engine", "vllm-v1", *FLAGS])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert len(_warnings(captured.err)) == 1
    assert EXPECTED_REFUSAL in captured.err.strip().splitlines()[-1]


def test_a_renamed_field_stops_a_campaign_with_exit_2(
    newer_release, renamed_field, tmp_path, capsys
):
    argv = ["fuzz", "--engine", "vllm-v1", "--budget-s", "5", "--seed", "0", "--no-db"]
    code = main([*argv, "--json", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert EXPECTED_REFUSAL in captured.err
    assert not list(tmp_path.rglob("violations.json"))  # no finding, no bundle


def test_an_unknown_way_of_sending_resumed_requests_is_named(monkeypatch):
    """Neither resumed flag on CachedRequestData, and NewRequestData.prefill_token_ids
    optional: the resumed shim knows none of the shapes."""
    from vllm.v1.core.sched import output

    fields = [("req_ids", list), ("new_block_ids", list), ("num_computed_tokens", list)]
    cached = dataclasses.make_dataclass("CachedRequestData", fields)
    new = dataclasses.make_dataclass(
        "NewRequestData",
        [("req_id", str), ("block_ids", list), ("num_computed_tokens", int),
         ("prefill_token_ids", object, dataclasses.field(default=None))],
    )  # fmt: skip
    monkeypatch.setattr(output, "CachedRequestData", cached)
    monkeypatch.setattr(output, "NewRequestData", new)
    [problem] = shapes.shape_mismatches()
    assert problem.startswith("CachedRequestData has neither resumed_req_ids")
    assert "era resumed-as-new-request, 0.34.0" in problem


def test_the_known_release_has_every_shape():
    assert shapes.shape_mismatches() == []


def test_a_wrong_num_computed_count_is_a_violation_with_both_counts(monkeypatch):
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler._update_after_schedule

    def one_too_many(self, scheduler_output):
        original(self, scheduler_output)
        if "r0" in scheduler_output.num_scheduled_tokens:
            self.requests["r0"].num_computed_tokens += 1

    monkeypatch.setattr(Scheduler, "_update_after_schedule", one_too_many)
    requests = (
        TraceRequest("r0", 0.0, 4, prompt_token_ids=tuple(range(100, 108))),
        TraceRequest("r1", 0.01, 3, prompt_token_ids=tuple(range(200, 209))),
    )
    config = EngineConfig(
        block_size=4, num_gpu_blocks=32, max_num_batched_tokens=4, max_num_seqs=4, max_model_len=64
    )
    result = loop.run(requests, "vllm-v1", config, loop.SimOptions())
    [violation] = result.violations
    assert violation.invariant == "accounting.manager-agreement"
    assert violation.request_id == "r0"
    assert (violation.expected, violation.found) == ("4", "5")  # the schedule: 0 + 4
    assert "num_computed_tokens 4, the KV manager 5" in violation.message
    assert result.exit_code == 1


def test_vllm_appending_more_tokens_than_sampled_is_an_engine_fault(monkeypatch):
    """The adapter's check of vLLM's appended tokens is vLLM's fault (EngineFault: an
    engine-crash naming both counts), not an assertion of the harness."""
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.update_from_output

    def one_more_token(self, scheduler_output, model_runner_output):
        out = original(self, scheduler_output, model_runner_output)
        request = self.requests.get("r0")
        if request is not None and request.output_token_ids:
            request.append_output_token_ids(7)
        return out

    monkeypatch.setattr(Scheduler, "update_from_output", one_more_token)
    requests = (TraceRequest("r0", 0.0, 4, prompt_token_ids=tuple(range(100, 108))),)
    config = EngineConfig(
        block_size=4, num_gpu_blocks=32, max_num_batched_tokens=8, max_num_seqs=4, max_model_len=64
    )
    result = loop.run(requests, "vllm-v1", config, loop.SimOptions())
    [violation] = result.violations
    assert violation.invariant == "engine-crash"
    assert "r0: vLLM appended 2 tokens for 1 sampled" in violation.message
