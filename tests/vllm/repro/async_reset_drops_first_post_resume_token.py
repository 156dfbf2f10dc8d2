"""vLLM 0.12.0, async scheduling: `Scheduler.reset_prefix_cache(reset_running_requests=True)`
marks every running request it preempts to drop its next output token
(`discard_latest_async_tokens = True`), whether or not a step of it is in flight. When
none is (the batch queue drained first, as `pause_generation(mode="keep")` waits for
before its `clear_cache` reset, or a partial prefill chunk that samples nothing), the
token dropped is the first VALID one after the resume: the request returns its outputs
shifted by one (the others are sampled after a prefix that lacks it), and vLLM's count of
its tokens falls one short of the runner's. Upstream: vllm-project/vllm issue #42043
("AsyncScheduler drops first post-resume token after pause_generation(mode="keep") +
clear_cache"), fixed by PR #42117: 0.25.0 drops exactly the placeholders in flight
(`async_tokens_to_discard = num_output_placeholders`), 0.33.0 and 0.34.0 the stale output
of the steps in flight (`drop_stale_output`).

Found by schedcheck's fault points on vLLM 0.12.0 (engines/vllm/v1/faults.py: the reset
with async scheduling): outputs.returned and accounting.num-tokens.

Block size 4, the AsyncScheduler EngineCore builds, no model (only a config.json):

    schedule(1)  a: 10-token prompt, all of it        (batch queue: step 1)
    update(1)    a samples 7001: its first output     (the queue drained: nothing in flight)
    reset_prefix_cache(reset_running_requests=True)   a preempted, the cache emptied
    schedule(2)  a again from 0: 11 known tokens
    update(2)    a samples 7002: its second output    0.12.0 drops it (the flag was set)
    ...          a's outputs must be 7001, 7002, 7003

Run: python async_reset_drops_first_post_resume_token.py
Exit 1 when the bug shows (a's outputs are not the tokens the runner sampled), 0 when it
does not. Imports only vLLM (CPU is enough).
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

EXPECTED_EXIT = {"0.12.0": 1, "0.25.0": 0, "0.33.0": 0, "0.34.0": 0}  # tests/vllm/test_repro.py
BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN, MAX_TOKENS = 4, 16, 64, 3
STEPS_MAX = 12


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
    """The AsyncScheduler EngineCore builds for async_scheduling, over one KV-cache group."""
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
            async_scheduling=True,
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
    assert scheduler_cls.__name__ == "AsyncScheduler", scheduler_cls
    params = inspect.signature(Scheduler.__init__).parameters
    sizes = {n: BLOCK_SIZE for n in ("block_size", "hash_block_size") if n in params}
    return scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        log_stats=False,
        **sizes,
    )


def main() -> int:
    scheduler = build_scheduler()
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    extra = {}
    if "eos_token_id" in inspect.signature(Request.__init__).parameters:  # to 0.12
        extra["eos_token_id"] = None
    a = Request(
        request_id="a",
        prompt_token_ids=list(range(100, 110)),
        sampling_params=SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True),
        pooling_params=None,
        arrival_time=0.0,
        block_hasher=get_request_block_hasher(BLOCK_SIZE, hash_fn),
        **extra,
    )
    scheduler.add_request(a)
    sampled: list[int] = []  # what the runner sampled for a, in order
    for step in range(1, STEPS_MAX + 1):  # one step in flight at a time: the queue drains
        if a.is_finished():
            break
        out = scheduler.schedule()
        if "a" not in out.num_scheduled_tokens:
            continue
        token = 7000 + step
        scheduler.update_from_output(out, runner_output(["a"], [[token]]))
        sampled.append(token)
        if step == 1:  # nothing in flight: the weight update's reset, then the resume
            scheduler.reset_prefix_cache(reset_running_requests=True)
    returned = list(a.output_token_ids)
    if returned != sampled[: len(returned)] or len(returned) < MAX_TOKENS:
        print(
            f"BUG: after reset_prefix_cache(reset_running_requests=True) with nothing in "
            f"flight, a returned {returned}, but the runner sampled {sampled}: vLLM dropped "
            f"the first token after the resume ({sampled[1]}) and kept the later ones"
        )
        return 1
    print(f"not reproduced: a returned {returned}, the tokens the runner sampled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
