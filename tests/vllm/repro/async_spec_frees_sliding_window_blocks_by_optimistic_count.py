"""vLLM 0.12.0 / 0.25.0, async scheduling + speculative decoding + a sliding-window
KV-cache group: the scheduler frees a request's out-of-window blocks by its OPTIMISTIC
computed-token count, which counts the still in-flight step's draft as accepted. When
that draft is rejected, the model runner moves the request back one position, so the
next step's first query reads a key in a block the scheduler already freed, and handed
to another request in the same step (wrong attention outputs; the other request
overwrites the key).

KVCacheManager.allocate_slots calls `coordinator.remove_skipped_blocks(request_id, n)`
before allocating, and SlidingWindowManager frees the blocks of tokens below
n - sliding_window + 1. n is request.num_computed_tokens (0.12.0) / total_computed_tokens
(0.25.0): with the batch queue (EngineCore, depth 2) schedule(N+1) runs before
update_from_output(N), so n already counts step N's draft. The runner learns of the
rejection and steps back (gpu_model_runner.py `_update_states`:
`num_computed_tokens -= num_rejected`). Fixed upstream by vllm-project/vllm PR #47728
("[Bugfix][V1] Free out-of-window blocks on the processed-token basis under async
scheduling"): 0.33.0 and 0.34.0 free on max(0, total_computed_tokens -
request.num_in_flight_tokens).

Block size 4, window W = 4 (a query at position q reads keys q-3..q), 1 draft token per
step (EAGLE where async scheduling refuses n-gram: 0.12.0, 0.25.0; no model is loaded),
9 blocks shared by a full-attention group and a sliding-window group, block 0 the null
block. Every draft is rejected (each step samples one token). Bug releases:

    schedule(1)  a: prompt, positions 0..8                  a.num_computed 0 -> 9
                 window blocks [4 5 6]
    schedule(2)  a: 2 tokens (step 1's sample + a draft)    9 -> 11 (step 1 in flight)
                 frees tokens < 9-3 = 6: block 4 (tokens 0..3)
    update(1)    a samples 1 token (a prefill: no draft)
                 b arrives, 3-token prompt
    schedule(3)  a: 2 tokens, at 11, 12 as it counts        11 -> 13 (step 2 in flight)
                 frees tokens < 11-3 = 8: block 5 (tokens 4..7), to the free queue's
                 tail; a takes 2 blocks from its head, b's prefill the last two:
                 block 5 becomes b's window block, written by b in step 3
    update(2)    a's step-2 draft rejected: a.num_computed 13 -> 12
    runner       step 3 runs a at positions 10, 11 (10 = the token sampled in step 2):
                 position 10's window is 7..10, key 7 is in block 5: freed, now b's.

Fixed releases free at schedule(3) on 11 - 2 in-flight tokens = 9 (tokens < 6), and
block 5 at schedule(5) (13 - 2 = 11: tokens < 8), when the runner's first query is at 12
(window 9..12). They take n-gram drafts; with EAGLE they exit 0 as well.

Drafts: under async scheduling EngineCore never calls update_draft_token_ids (post_step
skips it); the AsyncScheduler schedules placeholder drafts ([-1] per request), which the
runner fills; the scheduler learns of a rejection from that step's ModelRunnerOutput.

Run: python async_spec_frees_sliding_window_blocks_by_optimistic_count.py
Exit 1 when the bug shows (a block under the runner's real window is no longer the
request's after schedule), 0 when it does not. Imports only vLLM (CPU is enough: no model
is loaded, only a config.json is written).
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
    SlidingWindowSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

EXPECTED_EXIT = {"0.12.0": 1, "0.25.0": 1, "0.33.0": 0, "0.34.0": 0}  # tests/vllm/test_repro.py
BLOCK_SIZE, WINDOW, NUM_BLOCKS, MAX_MODEL_LEN = 4, 4, 9, 64  # block 0 is vLLM's null block
SLIDING = 1  # the KV-cache group id of the sliding-window layer (group 0: full attention)
STEPS = 6


def runner_output(req_ids, sampled):
    """vLLM's ModelRunnerOutput for these requests; 0.12 to 0.33 also want req_id_to_index
    (0.34 dropped it: the scheduler indexes req_ids), 0.12 also the fields it has no
    defaults for (no logprobs, no pooler output: a generate runner's)."""
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
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
    }
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


def build_vllm_config(model: ModelConfig, method: str) -> VllmConfig:
    """Async scheduling with 1 draft token of `method` (vLLM validates the pair here: a
    release that refuses it raises ValueError, pydantic's ValidationError)."""
    parallel = ParallelConfig()
    draft = {"method": method, "num_speculative_tokens": 1}
    if method == "ngram":
        draft.update(prompt_lookup_min=1, prompt_lookup_max=1)
    else:  # a draft model: the target's tiny config, never loaded
        draft["model"] = model.model
    config = VllmConfig(
        model_config=model,
        scheduler_config=SchedulerConfig(
            max_num_seqs=4,
            max_num_batched_tokens=32,
            max_model_len=MAX_MODEL_LEN,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            async_scheduling=True,
        ),
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
        device_config=DeviceConfig(device="cpu"),
        parallel_config=parallel,
        speculative_config=SpeculativeConfig(
            **draft, target_model_config=model, target_parallel_config=parallel
        ),
    )
    config.cache_config.num_gpu_blocks = NUM_BLOCKS
    return config


def build_scheduler() -> tuple[Scheduler, str]:
    """The AsyncScheduler EngineCore builds (SchedulerConfig.get_scheduler_cls with
    async_scheduling) over a hybrid KV cache, and the draft method it took: n-gram where
    the release runs it with async scheduling, else EAGLE (0.12.0, 0.25.0 refuse n-gram:
    "async scheduling is only supported with EAGLE/MTP ...")."""
    model = ModelConfig(
        model=tiny_model_dir(),
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        seed=0,
    )
    try:
        config, method = build_vllm_config(model, "ngram"), "n-gram"
    except ValueError:
        config, method = build_vllm_config(model, "eagle"), "EAGLE"
    shape = {"block_size": BLOCK_SIZE, "num_kv_heads": 1, "head_size": 1, "dtype": torch.float32}
    full = FullAttentionSpec(**shape)
    window = SlidingWindowSpec(**shape, sliding_window=WINDOW)
    kv = KVCacheConfig(
        num_blocks=NUM_BLOCKS,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["model.layers.0.self_attn.attn"], full),
            KVCacheGroupSpec(["model.layers.1.self_attn.attn"], window),
        ],
    )
    scheduler_cls = config.scheduler_config.get_scheduler_cls()
    assert scheduler_cls.__name__ == "AsyncScheduler", scheduler_cls
    params = inspect.signature(Scheduler.__init__).parameters
    sizes = {n: BLOCK_SIZE for n in ("block_size", "hash_block_size") if n in params}
    scheduler = scheduler_cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        log_stats=False,
        **sizes,
    )
    return scheduler, method


def make_request(rid: str, prompt: list[int], max_tokens: int, hasher) -> Request:
    extra = {}
    if "eos_token_id" in inspect.signature(Request.__init__).parameters:  # to 0.12
        extra["eos_token_id"] = None
    return Request(
        request_id=rid,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        arrival_time=0.0,
        block_hasher=hasher,
        **extra,
    )


def owners(scheduler: Scheduler, block_id: int, but: str) -> list[str]:
    """'request (group g)' for every other request whose block table holds block_id."""
    managers = scheduler.kv_cache_manager.coordinator.single_type_managers
    return [
        f"{rid} (group {g})"
        for g, manager in enumerate(managers)
        for rid, blocks in manager.req_to_blocks.items()
        if rid != but and any(b.block_id == block_id for b in blocks)
    ]


def main() -> int:
    scheduler, method = build_scheduler()
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)
    a = make_request("a", list(range(100, 109)), 8, hasher)
    scheduler.add_request(a)
    window = scheduler.kv_cache_manager.coordinator.single_type_managers[SLIDING]
    null_block = scheduler.kv_cache_manager.block_pool.null_block
    in_flight = []  # EngineCore's batch queue (depth 2): scheduled, output not yet back
    checked = []  # the steps whose schedule() the check ran after
    for step in range(1, STEPS + 1):
        if step == 3:  # arrives while step 2 runs
            scheduler.add_request(make_request("b", [200, 201, 202], 4, hasher))
        computed = a.num_computed_tokens  # optimistic: counts the in-flight step's draft
        before = [blk.block_id for blk in window.req_to_blocks.get("a", [])]
        last = in_flight[-1] if in_flight else None
        # every draft is rejected (each request samples one token per step)
        rejected = len(last.scheduled_spec_decode_tokens.get("a", ())) if last else 0
        out = scheduler.schedule()
        if "a" in out.num_scheduled_tokens and rejected:
            first_query = computed - rejected  # where the runner puts a's first token
            lowest_key = max(0, first_query - WINDOW + 1)
            blocks = window.req_to_blocks["a"]
            checked.append(step)
            for pos in range(lowest_key, first_query + 1):
                index = pos // BLOCK_SIZE
                if blocks[index] is not null_block and blocks[index].block_id == before[index]:
                    continue
                freed = before[index]
                taken = owners(scheduler, freed, but="a")
                print(
                    f"BUG ({method} drafts): schedule({step}) counted a at {computed} "
                    f"computed tokens (step {step - 1}'s draft in flight) and freed a's "
                    f"sliding-window block {freed} (tokens {index * BLOCK_SIZE}.."
                    f"{index * BLOCK_SIZE + BLOCK_SIZE - 1}; a's block table now holds "
                    f"block {blocks[index].block_id}); the draft is rejected, so the "
                    f"runner's first query of a in step {step} is at position "
                    f"{first_query}, whose window {lowest_key}..{first_query} reads key "
                    f"{pos} from block {freed}, now held by {', '.join(taken) or 'no one'}"
                )
                return 1
        in_flight.append(out)
        if len(in_flight) == 2:  # the batch queue is full: the oldest step's output
            done = in_flight.pop(0)
            ids = list(done.num_scheduled_tokens)
            # one token each: a prompt fits in one chunk; a decode's draft is rejected
            scheduler.update_from_output(done, runner_output(ids, [[7000 + step]] * len(ids)))
    print(
        f"not reproduced ({method} drafts): after schedule({checked[0]}) to "
        f"schedule({checked[-1]}), the sliding-window blocks under a's real first query "
        "window (the in-flight draft rejected) were still a's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
