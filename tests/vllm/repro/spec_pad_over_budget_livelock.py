#!/usr/bin/env python3
"""vLLM 0.33: with speculative decoding, a fully cached prompt waits forever when
1 + num_speculative_tokens exceeds the token budget (a livelock).

Standalone: imports only vLLM (CPU, no GPU, no model weights: a tiny config.json).
Exit 1 when the bug shows (the request is never scheduled in 20 steps), 0 otherwise.

Setup: n-gram speculative decoding with K = 2, max_num_batched_tokens 2, prefix caching,
block size 4.

    a (9-token prompt, 1 output) runs in chunks of 2 and finishes; its blocks 0, 1
    (tokens 0..7) stay cached. b arrives with the same 9-token prompt: its prefix hit is 8
    tokens, so num_new_tokens == 1 with num_computed_tokens > 0, and the waiting loop
    pads it to 1 + K = 3 rows for a uniform spec-decode batch. 3 > the budget of 2, so it
    takes `if padded_num_tokens > request_token_budget: break  # Prefer to not schedule
    than schedule un-padded.` Nothing else runs, nothing changes: b is never scheduled.

The config is accepted (vLLM only warns that max_num_scheduled_tokens is small); the same
request without the padding would run its one token at once.
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
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

EXPECTED_EXIT = {"0.33.0": 1, "0.34.0": 1}  # the bug shows in both (tests/vllm/test_repro.py)
STEPS_MAX = 20
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
            max_num_seqs=2,
            max_num_batched_tokens=2,
            max_model_len=MAX_MODEL_LEN,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=0,
            is_encoder_decoder=False,
        ),
        cache_config=CacheConfig(
            block_size=BLOCK_SIZE, enable_prefix_caching=True, prefix_caching_hash_algo="sha256"
        ),
        device_config=DeviceConfig(device="cpu"),
        parallel_config=parallel_config,
        speculative_config=SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=2,
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


def request(request_id: str, prompt: list[int], hasher) -> Request:
    return Request(
        request_id=request_id,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=1, ignore_eos=True),
        pooling_params=None,
        arrival_time=0.0,
        block_hasher=hasher,
    )


def run_until_idle(scheduler: Scheduler, token: int) -> int:
    """Steps until nothing runs; every request that samples gets `token`."""
    for step in range(STEPS_MAX):
        out = scheduler.schedule()
        ids = list(out.num_scheduled_tokens)
        if not ids:
            return step
        sampled = [
            [token]
            if scheduler.requests[r].num_computed_tokens >= scheduler.requests[r].num_tokens
            else []
            for r in ids
        ]
        scheduler.update_from_output(
            out,
            runner_output(ids, sampled),
        )
    return STEPS_MAX


def main() -> int:
    scheduler = make_scheduler()
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)
    prompt = list(range(10, 19))
    scheduler.add_request(request("a", prompt, hasher))
    run_until_idle(scheduler, 99)
    assert not scheduler.has_unfinished_requests(), "a must finish"
    scheduler.add_request(request("b", prompt, hasher))
    for _ in range(STEPS_MAX):
        out = scheduler.schedule()
        if out.num_scheduled_tokens:
            print(f"no bug: b scheduled {dict(out.num_scheduled_tokens)}")
            return 0
    print(
        f"BUG: b (fully cached prompt, 8 of 9 tokens hit) is not scheduled in {STEPS_MAX} "
        "steps with nothing running: its spec-decode padding (1 + K = 3) exceeds the "
        "budget (2) and the waiting loop breaks"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
