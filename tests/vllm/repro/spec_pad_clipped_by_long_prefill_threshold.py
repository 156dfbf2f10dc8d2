#!/usr/bin/env python3
"""vLLM 0.33: a new decode request padded for speculative decoding is cut back by
long_prefill_token_threshold, and Scheduler.schedule() fails its own assertion.

Standalone: imports only vLLM (CPU, no GPU, no model weights: a tiny config.json).
Exit 1 when the bug shows (the AssertionError), 0 when it does not.

Setup: n-gram speculative decoding with num_speculative_tokens K = 1,
long_prefill_token_threshold 1, max_num_batched_tokens 8.

    step 1  request a (1-token prompt) is prefilled and samples a token; the drafter
            proposes one draft for it (update_draft_token_ids); request b (1-token
            prompt) arrives.
    step 2  a runs (its 1 + 1 tokens cut to 1 by the threshold, the draft dropped).
            b is admitted with num_new_tokens == 1 beside a scheduled running request,
            so the waiting loop pads it to 1 + K = 2 rows ("pad new decode requests to
            uniform spec decoding size", pad_spec_decode = True); then
            `if 0 < long_prefill_token_threshold < num_new_tokens` cuts it to 1, and
            `assert num_new_tokens == 1 + self.num_spec_tokens` (scheduler.py, the
            pad_spec_decode branch of the waiting loop) fails.

The Mamba block-aligned split has a branch for the same clipping ("Alignment clipped the
placeholder rows ... drop the padding instead of shortening it"); the threshold has none.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

EXPECTED_EXIT = {"0.33.0": 1, "0.34.0": 1}  # the bug shows in both (tests/vllm/test_repro.py)
BLOCK_SIZE = 4
MAX_MODEL_LEN = 64


def runner_output(req_ids, sampled):
    """vLLM's ModelRunnerOutput for these requests; 0.33 also wants req_id_to_index (0.34
    dropped it: the scheduler indexes req_ids)."""
    fields = {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    index = {rid: i for i, rid in enumerate(req_ids)}
    extra = {"req_id_to_index": index} if "req_id_to_index" in fields else {}
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, **extra)


def tiny_model_dir() -> str:
    path = tempfile.mkdtemp(prefix="vllm_repro_model_")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 32000,
        "max_position_embeddings": MAX_MODEL_LEN,
        "torch_dtype": "float32",
    }
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


def make_scheduler() -> Scheduler:
    model_config = ModelConfig(
        model=tiny_model_dir(),
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        seed=0,
    )
    parallel_config = ParallelConfig()
    vllm_config = VllmConfig(
        model_config=model_config,
        scheduler_config=SchedulerConfig(
            max_num_seqs=4,
            max_num_batched_tokens=8,
            max_model_len=MAX_MODEL_LEN,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=1,
            is_encoder_decoder=False,
        ),
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=False),
        device_config=DeviceConfig(device="cpu"),
        parallel_config=parallel_config,
        speculative_config=SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=1,
            prompt_lookup_min=1,
            prompt_lookup_max=1,
            target_model_config=model_config,
            target_parallel_config=parallel_config,
        ),
    )
    vllm_config.cache_config.num_gpu_blocks = 32
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=32,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    return Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=BLOCK_SIZE,
        log_stats=False,
    )


def request(request_id: str, prompt: list[int]) -> Request:
    return Request(
        request_id=request_id,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=4, ignore_eos=True),
        pooling_params=None,
        arrival_time=0.0,
    )


def main() -> int:
    scheduler = make_scheduler()
    scheduler.add_request(request("a", [11]))
    step1 = scheduler.schedule()
    assert dict(step1.num_scheduled_tokens) == {"a": 1}
    scheduler.update_from_output(
        step1,
        runner_output(["a"], [[12]]),
    )
    scheduler.update_draft_token_ids(DraftTokenIds(["a"], [[13]]))
    scheduler.add_request(request("b", [21]))
    try:
        step2 = scheduler.schedule()
    except AssertionError:
        print(
            "BUG: schedule() failed `assert num_new_tokens == 1 + self.num_spec_tokens` "
            "(a padded spec-decode request cut by long_prefill_token_threshold)"
        )
        return 1
    print(
        f"no bug: step 2 scheduled {dict(step2.num_scheduled_tokens)}, "
        f"drafts {dict(step2.scheduled_spec_decode_tokens)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
