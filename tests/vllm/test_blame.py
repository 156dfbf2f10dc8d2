"""Blame the right code: the adapter broken on purpose is schedcheck's crash, never vLLM's.

vLLM's scheduler output is handed to the adapter with a field renamed (what a new release
does): the adapter's read of the old name raises inside engines/vllm/v1/, so the finding
is a harness-crash naming the adapter's frame, with a bundle that replays it, not an
engine-crash blamed on vLLM.
"""

from __future__ import annotations

import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

vllm_scheduler = pytest.importorskip("vllm.v1.core.sched.scheduler")
pytestmark = pytest.mark.vllm

TRACE = [
    TraceRequest("r0", 0.0, 3, prompt_token_ids=tuple(range(100, 110))),
    TraceRequest("r1", 0.001, 3, prompt_token_ids=tuple(range(200, 207))),
]
CONFIG = EngineConfig(
    block_size=4, num_gpu_blocks=32, max_num_batched_tokens=8, max_num_seqs=4, max_model_len=64
)


@pytest.fixture
def renamed_field(monkeypatch):
    """vLLM's SchedulerOutput names `num_scheduled_tokens` `tokens_per_request` from the
    second step on (a release renamed it)."""
    schedule = vllm_scheduler.Scheduler.schedule

    def renamed(self):
        out = schedule(self)
        self.schedcheck_calls = getattr(self, "schedcheck_calls", 0) + 1
        if self.schedcheck_calls >= 2:
            out.tokens_per_request = out.num_scheduled_tokens
            object.__delattr__(out, "num_scheduled_tokens")
        return out

    monkeypatch.setattr(vllm_scheduler.Scheduler, "schedule", renamed)


def test_the_adapter_broken_by_a_renamed_field_is_a_harness_crash(renamed_field, tmp_path):
    result = run(TRACE, "vllm-v1", CONFIG, SimOptions())
    [crash] = result.violations
    assert crash.invariant == "harness-crash"
    assert crash.case.startswith("AttributeError at engines/vllm/v1/"), crash.case
    assert "num_scheduled_tokens" in crash.message
    assert "engine-crash" not in crash.signature
    bundle = save_bundle(tmp_path / "crash", result)
    assert (bundle / "violations.json").is_file()
