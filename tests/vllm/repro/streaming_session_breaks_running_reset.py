"""vLLM 0.34.0, resumable (streaming-input) sessions: a cache reset that preempts the
running requests raises while a session waits for its next input chunk. A session keeps its
KV blocks between chunks (WAITING_FOR_STREAMING_REQ, in no running queue), so
`Scheduler.reset_prefix_cache(reset_running_requests=True)` preempts every running
request, still finds blocks in use, and raises RuntimeError ("Failed to reset KV cache even
when all the running requests are preempted ... likely due to ... remote KV transfer").
That is the call an RL weight update makes: `pause_generation(clear_cache=True)` (the
default) ends in `EngineCore._finish_pause` -> `_reset_caches(reset_running_requests=True)`,
which re-raises it; so does `/reset_prefix_cache?reset_running_requests=true`. A server
with one idle streaming session cannot clear its cache for a weight update.

Found by schedcheck's `--family streaming` campaign (engines/vllm/v1/sessions.py and the
fault points of engines/vllm/v1/faults.py, which take those calls): `engine-crash
[RuntimeError at vllm/v1/core/sched/scheduler.py:reset_prefix_cache]`, 2 requests. No
upstream report found (searched 2026-12-07).

Block size 4, 16 blocks (block 0 is vLLM's null block):

    turn 1   a: 6 prompt tokens, max_tokens 1     a stops, its session kept (2 blocks)
    reset    reset_prefix_cache(reset_running_requests=True)    -> RuntimeError

Run: python streaming_session_breaks_running_reset.py
Exit 1 when the bug shows (the reset raises), 0 when it does not. Imports only vLLM.
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
BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN = 4, 16, 32


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
            max_num_batched_tokens=16,
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
    scheduler.add_request(request("a", list(range(100, 106)), 1, hash_fn))
    for k in range(2):  # the prefill samples a's one token: its turn stops, the session kept
        out = scheduler.schedule()
        ids = list(out.num_scheduled_tokens)
        scheduler.update_from_output(out, runner_output(ids, [[7000 + k]] * len(ids)))
    a = scheduler.requests["a"]
    print(f"a {a.status.name}, {a.num_computed_tokens}/{a.num_tokens} computed; nothing runs")
    try:
        scheduler.reset_prefix_cache(reset_running_requests=True)
    except RuntimeError as error:
        print(f"BUG: reset_prefix_cache(reset_running_requests=True) raised: {error}")
        return 1
    print("not reproduced: the reset went through")
    return 0


if __name__ == "__main__":
    sys.exit(main())
