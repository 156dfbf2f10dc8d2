"""The model's EOS through SGLang (SimOptions.eos_token_id; tox -e sglang): SGLang stops each
request at the first EOS it samples, as a stop token (`FINISH_MATCHED_TOKEN`), and returns
what the reference engine returns, with overlap scheduling off and on and with mixed chunks.

A vocabulary of 5 sampled ids, one the EOS: every request below stops before max_tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sglang_driver import SGLANG_0_5_23

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import run

pytestmark = SGLANG_0_5_23

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from test_eos import OPTIONS, _trace  # noqa: E402  (six requests and a later turn)

TRACE = _trace()


@pytest.mark.parametrize(
    "extra",
    [{}, {"async_scheduling": "true"}, {"enable_mixed_chunk": "true"}],
    ids=["normal", "overlap", "mixed"],
)
def test_sglang_stops_each_request_at_its_first_eos_as_the_reference_does(extra):
    config = EngineConfig(
        num_gpu_blocks=64,
        block_size=4,
        max_num_batched_tokens=32,
        block_manager="radix",
        extra=extra,
    )
    result = run(TRACE, "sglang", config, OPTIONS, profile("unit"))
    reference = run(
        TRACE,
        "reference",
        EngineConfig(num_gpu_blocks=64, block_size=4, max_num_batched_tokens=32),
        OPTIONS,
        profile("unit"),
    )
    assert result.violations == [] and result.finished == len(TRACE)
    assert result.coverage["eos-stop"] == reference.coverage["eos-stop"] == len(TRACE)
    assert dict(result.outputs.items()) == dict(reference.outputs.items())
