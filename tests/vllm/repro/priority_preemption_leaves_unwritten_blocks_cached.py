"""vLLM 0.33, priority scheduling + prefix caching: a request preempted by the schedule()
call that had just scheduled it leaves the blocks allocated for that (never run) chunk in
the prefix cache. When it is re-admitted, its prefix-cache hit covers tokens whose KV was
never computed: attention reads whatever the block held before (wrong outputs).

Kv_cache_manager.allocate_slots caches every full block up to num_computed + num_new
tokens when the chunk is scheduled (the chunk will write it in this step). Under the
priority policy, schedule() may then preempt that request later in the same call (the
lowest-priority running request, chosen by max(priority, arrival_time)), taking back its
token budget (`if preempted_req in scheduled_running_reqs: ...`) but not the cached
blocks. Block size 4, 9 usable blocks, budget 16, long_prefill_token_threshold 8:

    step 1  low (priority 1, 32-token prompt) alone: tokens 0..15      blocks 1-4
    step 2  low 16..23 (threshold 8), high (priority 0, 4 tokens) admitted
    step 3  low 24..31 scheduled: blocks 8, 9 allocated and CACHED; high's decode needs
            a block, none is free -> low preempted (it was scheduled in this call);
            its blocks are freed in reverse order, high takes block 9 (evicting it),
            block 8 stays cached with the hash of low's tokens 24..27, never written
    later   low is re-admitted with a prefix hit of 28 tokens, though only 24 of its
            tokens ever ran.

Run: python priority_preemption_leaves_unwritten_blocks_cached.py
Exit 1 when the bug shows (a hit longer than what ran), 0 when it does not.
Imports only vLLM (CPU is enough: no model is loaded, only a config.json is written).
"""

import dataclasses
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
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

EXPECTED_EXIT = {"0.33.0": 1, "0.34.0": 1}  # the bug shows in both (tests/vllm/test_repro.py)
BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN = 4, 10, 64  # block 0 is vLLM's null block


def runner_output(req_ids, sampled):
    """vLLM's ModelRunnerOutput for these requests; 0.33 also wants req_id_to_index (0.34
    dropped it: the scheduler indexes req_ids)."""
    fields = {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    index = {rid: i for i, rid in enumerate(req_ids)}
    extra = {"req_id_to_index": index} if "req_id_to_index" in fields else {}
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, **extra)


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


def build_scheduler() -> Scheduler:
    model = ModelConfig(
        model=tiny_model_dir(),
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        seed=0,
    )
    sched = SchedulerConfig(
        max_num_seqs=4,
        max_num_batched_tokens=16,
        max_model_len=MAX_MODEL_LEN,
        enable_chunked_prefill=True,
        long_prefill_token_threshold=8,
        is_encoder_decoder=False,
        async_scheduling=False,
        policy="priority",
    )
    cache = CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True)
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
    return Scheduler(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK_SIZE,
        log_stats=False,
    )


def make_request(rid, prompt, priority, max_tokens, hasher, arrival_time):
    return Request(
        request_id=rid,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        priority=priority,
        arrival_time=arrival_time,
        block_hasher=hasher,
    )


def run_step(scheduler, step, ran_until):
    """One step as EngineCore runs it; returns the (re)admissions of this step as
    (id, num_computed_tokens, tokens whose KV had been computed before this step)."""
    out = scheduler.schedule()
    admitted = [(r.req_id, r.num_computed_tokens) for r in out.scheduled_new_reqs]
    cached = out.scheduled_cached_reqs
    resumed = getattr(cached, "resumed_req_ids", ())  # 0.34: resumed ones are new reqs
    admitted += [
        (rid, cached.num_computed_tokens[i])
        for i, rid in enumerate(cached.req_ids)
        if rid in resumed
    ]
    admitted = [(rid, n, ran_until.get(rid, 0)) for rid, n in admitted]
    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in req_ids:
        request = scheduler.requests[rid]
        ran_until[rid] = request.num_computed_tokens  # the chunk ran: KV up to here
        done = request.num_computed_tokens >= request.num_tokens
        sampled.append([5000 + step] if done else [])
    runner = runner_output(req_ids, sampled)
    scheduler.update_from_output(out, runner)
    return admitted


def main() -> int:
    scheduler = build_scheduler()
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)
    scheduler.add_request(make_request("low", list(range(100, 132)), 1, 2, hasher, 0.0))
    ran_until = {}  # request id -> tokens whose KV some executed step wrote
    for step in range(1, 40):
        if step == 2:
            high = make_request("high", list(range(200, 204)), 0, 4, hasher, 1.0)
            scheduler.add_request(high)
        for rid, num_computed, computed_before in run_step(scheduler, step, ran_until):
            if num_computed > computed_before:
                print(
                    f"step {step}: {rid} admitted with a prefix-cache hit of {num_computed} "
                    f"tokens, but its KV was computed only up to {computed_before}: the "
                    "blocks of a chunk withdrawn by a same-step preemption stayed cached"
                )
                return 1
        if not scheduler.has_unfinished_requests():
            break
    print("no admission past the computed KV: not reproduced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
