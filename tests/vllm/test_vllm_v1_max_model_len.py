"""vLLM v1 at max_model_len (tox -e vllm-v1): requests whose prompt + max_tokens fill
max_model_len exactly, run one past it or leave one free, with chunked prefill on and
scheduled drafts: vLLM caps each sequence at max_model_len ("length"), and no step runs a
position at or past it or holds a block table wider than the runner's
(`accounting.max-model-len`)."""

from __future__ import annotations

import dataclasses

import pytest
from vllm_driver import NEEDS_VLLM_V1, skip_unless_drafts

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

pytestmark = NEEDS_VLLM_V1

MAX_MODEL_LEN = 24
CONFIG = EngineConfig(
    num_gpu_blocks=64,
    block_size=4,
    max_num_batched_tokens=16,
    max_num_seqs=8,
    max_model_len=MAX_MODEL_LEN,
)
TRACE = [  # prompt + max_tokens: 24 (exactly), 25 (one past), 23 (one free), 26
    TraceRequest("exact", 0.0, 4, prompt_token_ids=tuple(range(100, 120))),
    TraceRequest("past", 0.0, 5, prompt_token_ids=tuple(range(200, 220))),
    TraceRequest("free", 0.0, 3, prompt_token_ids=tuple(range(300, 320))),
    TraceRequest("long", 0.0, 3, prompt_token_ids=tuple(range(400, 423))),
]


@pytest.mark.parametrize("drafts", [0, 3])
def test_vllm_caps_each_sequence_at_max_model_len_within_the_runners_table(drafts):
    if drafts:
        skip_unless_drafts()
    config = dataclasses.replace(CONFIG, num_speculative_tokens=drafts)
    result = run(TRACE, "vllm-v1", config, SimOptions(), profile("unit"))
    assert result.violations == [] and result.finished == len(TRACE)
    lengths = {rid: len(outputs) for rid, outputs in result.outputs.items()}
    assert lengths == {"exact": 4, "past": 4, "free": 3, "long": 1}  # min(max_tokens, 24 - prompt)
