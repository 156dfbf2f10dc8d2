"""vLLM 0.34.0, resumable (streaming-input) sessions: a session whose chunks each fit
max_model_len but whose whole does not is scheduled past max_model_len, with a block table
shorter than the positions it runs. AsyncLLM validates each input chunk alone
(`InputProcessor._validate_model_input`: the chunk's length < max_model_len);
`Scheduler._update_request_as_session` appends the chunk to the kept session without a
check of the total, and `schedule()` then runs the session's new prompt tokens at positions
up to its whole length, while `KVCacheManager.allocate_slots` caps the blocks at
max_model_len. Every row of the model runner is max_model_len wide (token ids, block
table: cdiv(max_model_len, block_size) blocks); vllm#42489 reports the GPU runner failing
there (`gpu_input_batch.add_request`: "could not broadcast input array from shape (279,)
into shape (256,)"), which kills the engine for every request it serves.

Known upstream: vllm#42489 (closed as stale), its fix vllm PR #42502 (open, 2026-05; RFC
#51948), not in 0.34.0. schedcheck reaches it by the scheduler alone
(`accounting.max-model-len`, `shadow-kv.write-out-of-bounds`,
`shadow-kv.block-table-out-of-bounds`, 2 requests) once the vllm-v1 adapter validated a
session's chunk as vLLM's frontend does, and max_model_len was drawn near a request's length.

Block size 4, 16 blocks, max_model_len 16, budget 64 (block 0 is vLLM's null block):

    turn 1   a: 10 prompt tokens, max_tokens 3    a stops at 13 tokens, its session kept
    turn 2   a's next chunk: 11 tokens (fits max_model_len alone)  -> a has 23 tokens
    step     a runs positions 12..22 (past 16) with 4 blocks (positions < 16)

Run: python streaming_session_past_max_model_len.py
Exit 1 when the bug shows (positions past max_model_len scheduled), 0 when it does not.
Imports only vLLM.
"""

from __future__ import annotations

import dataclasses
import inspect
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
    VllmConfig,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

EXPECTED_EXIT = {"0.34.0": 1}
BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN = 4, 16, 16


def runner_output(req_ids, sampled):
    """vLLM's ModelRunnerOutput for these requests, in each release's shape."""
    fields = {f.name: f for f in dataclasses.fields(ModelRunnerOutput)}
    kwargs = {"req_ids": req_ids, "sampled_token_ids": sampled}
    if "req_id_to_index" in fields:
        kwargs["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
    for name, value in (("logprobs", None), ("prompt_logprobs_dict", {}), ("pooler_output", [])):
        field = fields.get(name)
        no_default = dataclasses.MISSING
        if field and field.default is no_default and field.default_factory is no_default:
            kwargs[name] = value
    return ModelRunnerOutput(**kwargs)


def build_scheduler() -> Scheduler:
    """The Scheduler EngineCore builds, over one KV-cache group."""
    path = tempfile.mkdtemp(prefix="vllm_repro_model_")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 1, "vocab_size": 32000, "rms_norm_eps": 1e-5,
        "max_position_embeddings": MAX_MODEL_LEN, "torch_dtype": "float32",
    }  # fmt: skip
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    model = ModelConfig(
        model=path, skip_tokenizer_init=True, dtype="float32", max_model_len=MAX_MODEL_LEN, seed=0
    )
    vllm_config = VllmConfig(
        model_config=model,
        scheduler_config=SchedulerConfig(
            max_num_seqs=4,
            max_num_batched_tokens=64,
            max_model_len=MAX_MODEL_LEN,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            async_scheduling=False,
        ),
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
        device_config=DeviceConfig(device="cpu"),
        parallel_config=ParallelConfig(),
    )
    vllm_config.cache_config.num_gpu_blocks = NUM_BLOCKS
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv = KVCacheConfig(
        num_blocks=NUM_BLOCKS,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    scheduler_cls = vllm_config.scheduler_config.get_scheduler_cls()
    assert scheduler_cls.__name__ == "Scheduler", scheduler_cls
    params = inspect.signature(Scheduler.__init__).parameters
    sizes = {n: BLOCK_SIZE for n in ("block_size", "hash_block_size") if n in params}
    return scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        log_stats=False,
        **sizes,
    )


def request(rid: str, prompt: list[int], max_tokens: int, hash_fn) -> Request:
    """One input chunk of session `rid` (the first creates it), as AsyncLLM sends it."""
    return Request(
        request_id=rid,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        arrival_time=0.0,
        block_hasher=get_request_block_hasher(BLOCK_SIZE, hash_fn),
        resumable=True,
    )


def main() -> int:
    scheduler = build_scheduler()
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    scheduler.add_request(request("a", list(range(100, 110)), 3, hash_fn))
    for k in range(3):  # the prefill and two decodes: a's turn stops, its session kept
        out = scheduler.schedule()
        ids = list(out.num_scheduled_tokens)
        scheduler.update_from_output(out, runner_output(ids, [[7000 + k]] * len(ids)))
    a = scheduler.requests["a"]
    print(f"turn 1: a {a.status.name}, {a.num_tokens} tokens")
    chunk = list(range(200, 211))
    assert len(chunk) < MAX_MODEL_LEN, "the chunk alone passes the frontend's check"
    scheduler.add_request(request("a", chunk, 3, hash_fn))  # the session's next chunk
    out = scheduler.schedule()
    end = a.num_computed_tokens  # advanced by schedule() to the chunk's end
    blocks = scheduler.kv_cache_manager.get_block_ids("a")[0]
    print(
        f"turn 2: a has {a.num_tokens} tokens, runs {out.num_scheduled_tokens.get('a', 0)} "
        f"up to position {end - 1} with {len(blocks)} blocks (max_model_len {MAX_MODEL_LEN})"
    )
    if end > MAX_MODEL_LEN or len(blocks) * BLOCK_SIZE < end:
        print(
            f"BUG: positions past max_model_len {MAX_MODEL_LEN} scheduled, beyond the "
            f"{len(blocks)} blocks (the runner's row holds {-(-MAX_MODEL_LEN // BLOCK_SIZE)})"
        )
        return 1
    print("not reproduced: the session stays within max_model_len")
    return 0


if __name__ == "__main__":
    sys.exit(main())
