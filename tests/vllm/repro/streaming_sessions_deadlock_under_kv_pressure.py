"""vLLM 0.34.0, resumable (streaming-input) sessions: a hold-and-wait deadlock under KV
pressure. A session keeps its KV blocks between input chunks (`Request.resumable`: after a
turn stops, `_handle_stopped_request` leaves it WAITING_FOR_STREAMING_REQ, its blocks held,
and re-enqueues it in `kv_holding_waiting`). When two sessions fill the pool between them
and each then gets its next chunk, each needs one more block, which only the other holds:
`allocate_slots` returns None for the first waiting request, the waiting loop breaks, and
no RUNNING request exists for the preemption path to reclaim. Every later `schedule()` is
empty while `has_unfinished_requests()` stays True: the engine spins forever, and every
other request behind them waits too.

Known upstream: vllm-project/vllm pull request #49439 ("[Bugfix][Core] Prevent streaming
session deadlock under KV pressure", open), which reclaims KV from another resumable
waiting session when allocation fails and nothing runs.

Found by a hand-driven probe of the session API (schedcheck does not drive resumable
requests yet: docs/results/vllm.md), not by a campaign.

Block size 4, 9 blocks (vLLM takes block 0 as its null block: 8 usable, 32 tokens, which
is max_model_len: the pool holds one full-length request, as vLLM's start-up demands):

    turn 1   a: 14 prompt tokens, max_tokens 1   a holds 4 blocks (15 tokens)
             b: 14 prompt tokens, max_tokens 1   b holds 4 blocks; 0 free
    turn 2   a, b: 4 more input tokens each       each needs a 5th block
    then     schedule() is empty, step after step; both sessions WAITING, 14/18 computed

Run: python streaming_sessions_deadlock_under_kv_pressure.py
Exit 1 when the bug shows (no step schedules anything while work is left), 0 when it does
not. Imports only vLLM (CPU is enough).
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
BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN = 4, 9, 32
STEPS_MAX = 20


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


def step(scheduler: Scheduler, token: int) -> dict[str, int]:
    """One step: every request whose chunk completes its known tokens samples `token`."""
    out = scheduler.schedule()
    ids = list(out.num_scheduled_tokens)
    reqs = [scheduler.requests[rid] for rid in ids]
    sampled = [[token] if r.num_computed_tokens >= r.num_tokens else [] for r in reqs]
    scheduler.update_from_output(out, runner_output(ids, sampled))
    return dict(out.num_scheduled_tokens)


def state(req: Request) -> str:
    return (
        f"{req.request_id} {req.status.name}, {req.num_computed_tokens}/{req.num_tokens} computed"
    )


def main() -> int:
    scheduler = build_scheduler()
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    pool = scheduler.kv_cache_manager.block_pool
    for rid, first in (("a", 100), ("b", 200)):  # turn 1: 14 prompt tokens, 1 output each
        scheduler.add_request(request(rid, list(range(first, first + 14)), 1, hash_fn))
    for k in range(4):
        step(scheduler, 7000 + k)
    a, b = scheduler.requests["a"], scheduler.requests["b"]
    print(f"after turn 1: {state(a)}; {state(b)}; free blocks {pool.get_num_free_blocks()}")
    for rid, first in (("a", 300), ("b", 400)):  # turn 2: the client's next 4 tokens each
        scheduler.add_request(request(rid, list(range(first, first + 4)), 1, hash_fn))
    scheduled = [step(scheduler, 8000 + k) for k in range(STEPS_MAX)]
    left = scheduler.has_unfinished_requests()
    print(f"turn 2, {STEPS_MAX} steps: scheduled {sum(map(len, scheduled))} chunks; {state(a)};")
    print(f"  {state(b)}; free blocks {pool.get_num_free_blocks()}; work left {left}")
    if left and not any(scheduled):
        print("BUG: each session waits for a block the other holds: nothing is scheduled again")
        return 1
    print("not reproduced: the sessions went on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
