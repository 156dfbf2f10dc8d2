"""The model's EOS through vllm-v1 (SimOptions.eos_token_id; tox -e vllm-v1): vLLM stops
each request at the first EOS it samples, as its frontend sets the EOS on SamplingParams,
and returns what the reference engine returns, synchronous, with drafts, async and (0.34.0)
as streaming-input sessions.

A vocabulary of 5 sampled ids, one the EOS: every request below but one stops before
max_tokens.
"""

from __future__ import annotations

import dataclasses

import pytest
from vllm_driver import NEEDS_VLLM_V1, needs_release, skip_unless_drafts

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import FIRST_TOKEN_ID

pytestmark = NEEDS_VLLM_V1

EOS = FIRST_TOKEN_ID + 1
OPTIONS = SimOptions(vocab_size=FIRST_TOKEN_ID + 5, eos_token_id=EOS)
CONFIG = EngineConfig(num_gpu_blocks=64, block_size=4, max_num_batched_tokens=32, max_num_seqs=8)
REQUESTS = [
    TraceRequest(f"r{i}", 0.01 * i, 12, prompt_token_ids=tuple(range(1000 * i, 1000 * i + 20 + i)))
    for i in range(1, 7)
]  # and a later turn of r2, read while r2 runs (a session continues it)
TRACE = [
    *REQUESTS[:2],
    TraceRequest("r2b", 0.02, 9, prompt_token_ids=(5,), parent_request_id="r2"),
    *REQUESTS[2:],
]
MODES = {
    "sync": {},
    "drafts": {"num_speculative_tokens": 3},
    "async": {"extra": {"async_scheduling": "true"}},
    "sessions": {"extra": {"streaming_input": "true"}},
    "async-sessions": {"extra": {"streaming_input": "true", "async_scheduling": "true"}},
}


SESSIONS = needs_release("0.34.0", "resumable streaming-input sessions")


@pytest.mark.parametrize(
    "mode",
    [m if "sessions" not in m else pytest.param(m, marks=SESSIONS) for m in MODES],
)
def test_vllm_stops_each_request_at_its_first_eos_as_the_reference_does(mode):
    if mode == "drafts":
        skip_unless_drafts()
    config = dataclasses.replace(CONFIG, **MODES[mode])
    result = run(TRACE, "vllm-v1", config, OPTIONS, profile("unit"))
    reference = run(
        TRACE, "reference", dataclasses.replace(config, extra={}), OPTIONS, profile("unit")
    )
    assert result.violations == [] and result.finished == len(TRACE)
    assert result.coverage["eos-stop"] == reference.coverage["eos-stop"] == 6  # all but r2b
    assert dict(result.outputs.items()) == dict(reference.outputs.items())
    if "sessions" in mode:
        assert result.coverage["session-resumed"] == 1
