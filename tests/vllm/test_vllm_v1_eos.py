"""The model's EOS through vllm-v1 (SimOptions.eos_token_id; tox -e vllm-v1): vLLM stops
each request at the first EOS it samples, as its frontend sets the EOS on SamplingParams,
and returns what the reference engine returns, synchronous, with drafts, async and (0.34.0)
as streaming-input sessions.

A vocabulary of 5 sampled ids, one the EOS: every request (tests/sim/test_eos.py's trace)
stops before max_tokens.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from vllm_driver import NEEDS_VLLM_V1, needs_release, skip_unless_drafts

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import run

pytestmark = NEEDS_VLLM_V1

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from test_eos import OPTIONS, _trace  # noqa: E402  (six requests and a later turn)

CONFIG = EngineConfig(num_gpu_blocks=64, block_size=4, max_num_batched_tokens=32, max_num_seqs=8)
TRACE = _trace()
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
    assert result.coverage["eos-stop"] == reference.coverage["eos-stop"] == len(TRACE)
    assert dict(result.outputs.items()) == dict(reference.outputs.items())
    if "sessions" in mode:
        assert result.coverage["session-resumed"] == 1
