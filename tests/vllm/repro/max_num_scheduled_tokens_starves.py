"""vLLM 0.33: with chunked prefill off, a prompt longer than max_num_scheduled_tokens is
admitted by every check and then never scheduled (and it blocks the queue behind it).

SchedulerConfig.verify_max_model_len requires max_num_batched_tokens >= max_model_len when
chunked prefill is off, so that every admitted prompt fits one step. max_num_scheduled_tokens
caps the step's tokens too (Scheduler.schedule: token_budget = max_num_scheduled_tokens),
but is not checked against max_model_len. The waiting loop then `break`s at the prompt:
    if not enable_chunked_prefill and num_new_tokens > request_token_budget: break
forever. Here: max_model_len 8, max_num_batched_tokens 8, max_num_scheduled_tokens 1,
a 4-token prompt (the frontend admits it: 4 < max_model_len).

Run: python max_num_scheduled_tokens_starves.py  (exit 1: the bug shows; 0: it does not)
Imports only vLLM (CPU is enough: no model is loaded, only a config.json is written).
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    SchedulerConfig,
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
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

EXPECTED_EXIT = {"0.33.0": 1, "0.34.0": 1}  # the bug shows in both (tests/vllm/test_repro.py)
BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN = 4, 3, 8


def tiny_model_dir() -> str:
    path = tempfile.mkdtemp()
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
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def main() -> int:
    model = ModelConfig(
        model=tiny_model_dir(),
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        seed=0,
    )
    sched = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=8,
        max_model_len=MAX_MODEL_LEN,
        enable_chunked_prefill=False,
        is_encoder_decoder=False,
        async_scheduling=False,
        max_num_scheduled_tokens=1,
    )
    cache = CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=False)
    config = VllmConfig(
        model_config=model,
        scheduler_config=sched,
        cache_config=cache,
        device_config=DeviceConfig(device="cpu"),
    )
    config.cache_config.num_gpu_blocks = NUM_BLOCKS
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv = KVCacheConfig(
        num_blocks=NUM_BLOCKS,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)],
    )
    scheduler = Scheduler(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK_SIZE,
        log_stats=False,
    )
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    scheduler.add_request(
        Request(
            request_id="r0",
            prompt_token_ids=[1000, 1001, 1002, 1003],
            sampling_params=SamplingParams(max_tokens=1, ignore_eos=True),
            pooling_params=None,
            block_hasher=get_request_block_hasher(BLOCK_SIZE, hash_fn),
        )
    )
    for step in range(100):
        out = scheduler.schedule()
        if out.total_num_scheduled_tokens:
            print(f"step {step}: scheduled {dict(out.num_scheduled_tokens)}: not reproduced")
            return 0
    print(
        "100 steps: the 4-token prompt was never scheduled (max_num_scheduled_tokens=1, "
        "chunked prefill off), and vLLM's config validation accepted the config"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
