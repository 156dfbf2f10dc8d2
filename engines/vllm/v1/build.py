"""Construct vLLM v1's real `Scheduler` (0.10.1.1 to 0.34.0, era shims in eras.py; with
its `KVCacheManager` and `BlockPool`) on a CPU, with no model, no tokenizer and no hub:
what `EngineCore.__init__` would build, minus the executor. Imports vLLM; import it only
from the vllm-v1 adapter, and from fit.py's probes where vLLM is installed.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from dataclasses import dataclass
from typing import Any

from schedcheck.engines.protocol import EngineConfig, is_async_scheduling
from schedcheck.engines.vllm.common import prepare_environment, write_tiny_model_dir
from schedcheck.engines.vllm.v1 import eras
from schedcheck.engines.vllm.v1.options import scheduler_kwargs

prepare_environment()

import torch  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    AttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

HASH_ALGO = "sha256"  # vLLM's default prefix_caching_hash_algo; cryptographic, seeded fixed
LAYER_NAME = "model.layers.{}.self_attn.attn"  # KV-cache group g holds layer g
NGRAM_LOOKUP_TOKENS = 1  # the n-gram proposer's window: unused (our drafter proposes)
SHARE_VLLM_CONFIGS = True  # engines of one config share its VllmConfig (build_vllm_config)
VLLM_CONFIGS_KEPT = 64  # recent configs kept a process (a larger cache adds 1 % of hits)


@dataclass(frozen=True)
class BuiltScheduler:
    scheduler: Scheduler
    block_hasher: Any  # Callable[[Request], list[BlockHash]]
    model_dir: str


def build_scheduler(config: EngineConfig) -> BuiltScheduler:
    """The scheduler, and the block hasher every Request must carry (as EngineCore passes).

    One KV-cache group per `config.kv_cache_groups` entry (FullAttentionSpec, then
    SlidingWindowSpec(sliding_window=W): vLLM's hybrid coordinator), one layer each,
    sharing `config.num_gpu_blocks` blocks, of which vLLM itself takes block 0 as its
    null block. With num_speculative_tokens K > 0, vLLM's n-gram speculative config: the
    scheduler schedules up to K drafts per decoding request (no draft model, no lookahead
    slots), which the simulator's drafter proposes; or, where config.extra names it, an
    EAGLE draft model (`_speculative_config`).
    """
    model_dir = write_tiny_model_dir(config.max_model_len)
    vllm_config = build_vllm_config(config, model_dir)
    kv_cache_config = KVCacheConfig(
        num_blocks=config.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec([LAYER_NAME.format(g)], _attention_spec(config, g))
            for g in range(len(config.kv_cache_groups))
        ],
    )
    # AsyncScheduler if async
    scheduler_cls = eras.scheduler_class(vllm_config.scheduler_config)
    assert issubclass(scheduler_cls, Scheduler), scheduler_cls
    scheduler = scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        log_stats=False,
        **eras.scheduler_init_kwargs(config.block_size),
    )
    hash_fn = eras.get_hash_fn_by_name(HASH_ALGO)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(config.block_size, hash_fn)
    return BuiltScheduler(scheduler=scheduler, block_hasher=hasher, model_dir=model_dir)


def _attention_spec(config: EngineConfig, group: int) -> AttentionSpec:
    kv_group = config.kv_cache_groups[group]
    shape = {"block_size": config.block_size, "num_kv_heads": 1, "head_size": 1}
    shape.update(eras.attention_spec_kwargs(FullAttentionSpec))
    if kv_group.kind == "sliding":
        return SlidingWindowSpec(
            **shape, dtype=torch.float32, sliding_window=kv_group.sliding_window
        )
    return FullAttentionSpec(**shape, dtype=torch.float32)


def build_vllm_config(config: EngineConfig, model_dir: str) -> VllmConfig:
    """The VllmConfig EngineCore would get for `config` (vLLM's own validation runs here:
    a config the release refuses raises ValueError, every time it is asked).

    Where SHARE_VLLM_CONFIGS, built once per config and process (the last
    VLLM_CONFIGS_KEPT configs) and shared by the engines of that config: vLLM's Scheduler
    and this adapter only read it (tests/vllm/test_vllm_v1_build_cache.py: after whole
    runs on it, a shared config equals one fresh from vLLM). About a third of a fuzz
    campaign's builds repeat a recent config (fit.py's probe, then the engine; Hypothesis
    running an example again): 3.6 % of a vllm-v1 campaign's CPU time saved."""
    if not SHARE_VLLM_CONFIGS:
        return _fresh_vllm_config(config, model_dir)
    return _shared_vllm_config(model_dir, _config_key(config))


def _config_key(config: EngineConfig) -> tuple[tuple[str, Any], ...]:
    """`config`'s fields as a hashable key (`extra` as its sorted items)."""
    extra = tuple(sorted(config.extra.items()))
    return tuple(
        (name, extra if name == "extra" else getattr(config, name)) for name in _CONFIG_FIELDS
    )


_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(EngineConfig))  # read once


@functools.lru_cache(maxsize=VLLM_CONFIGS_KEPT)
def _shared_vllm_config(model_dir: str, key: tuple[tuple[str, Any], ...]) -> VllmConfig:
    """The VllmConfig of the config whose fields are `key` (ValueError, uncached, where the
    release refuses it)."""
    fields: dict[str, Any] = {k: dict(v) if k == "extra" else v for k, v in key}
    return _fresh_vllm_config(EngineConfig(**fields), model_dir)


def _fresh_vllm_config(config: EngineConfig, model_dir: str) -> VllmConfig:
    """The VllmConfig of `config`, built and validated by vLLM."""
    model_config = pickle.loads(_model_config_bytes(model_dir, config.max_model_len))
    scheduler_config = SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=config.max_model_len,
        enable_chunked_prefill=config.enable_chunked_prefill,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        async_scheduling=is_async_scheduling(config),
        policy=config.extra.get("policy", "fcfs"),
        **scheduler_kwargs(config.extra),
        **eras.scheduler_config_kwargs(SchedulerConfig),
    )
    cache_config = CacheConfig(
        block_size=config.block_size,
        enable_prefix_caching=config.enable_prefix_caching,
        prefix_caching_hash_algo=HASH_ALGO,
        cache_dtype="auto",
    )
    parallel_config = ParallelConfig()
    vllm_config = VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        device_config=DeviceConfig(device="cpu"),
        parallel_config=parallel_config,
        speculative_config=_speculative_config(config, model_config, parallel_config),
    )
    vllm_config.cache_config.num_gpu_blocks = config.num_gpu_blocks
    return vllm_config


@functools.cache
def _model_config_bytes(model_dir: str, max_model_len: int) -> bytes:
    """The tiny model's ModelConfig, built (and validated by vLLM) once per max_model_len
    and process, pickled: its __post_init__ reads the model directory's config.json
    through transformers, 2-4 ms, most of a fuzz example's engine build. It depends on
    nothing else. Each VllmConfig gets its own copy, unpickled (VllmConfig updates the
    ModelConfig it is given): 41 us, against a deep copy's 104 us (two copies an example,
    with fit.py's probe). vLLM itself pickles its configs to its worker processes; a copy
    equals a fresh build (tests/vllm/test_vllm_v1_build_cache.py)."""
    return pickle.dumps(_model_config(model_dir, max_model_len), pickle.HIGHEST_PROTOCOL)


def _model_config(model_dir: str, max_model_len: int) -> ModelConfig:
    """A fresh ModelConfig of the tiny model (vLLM validates it: 2-4 ms)."""
    return ModelConfig(
        model=model_dir,
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=max_model_len,
        seed=0,
        **eras.model_config_kwargs(ModelConfig),
    )


def _speculative_config(
    config: EngineConfig, model_config: ModelConfig, parallel_config: ParallelConfig
) -> SpeculativeConfig | None:
    """K drafts by vLLM's model-free n-gram method, or by an EAGLE draft model where
    config.extra asks for it (eras.DRAFT_METHOD_KEY): its config is the tiny target's, never
    loaded; vLLM then keeps K lookahead slots per request. None: no speculative decoding."""
    if not config.num_speculative_tokens:
        return None
    method = config.extra.get(eras.DRAFT_METHOD_KEY, "ngram")
    if method == "eagle":
        return SpeculativeConfig(
            method="eagle",
            model=model_config.model,
            num_speculative_tokens=config.num_speculative_tokens,
            target_model_config=model_config,
            target_parallel_config=parallel_config,
        )
    assert method == "ngram", f"{eras.DRAFT_METHOD_KEY}={method!r}: one of {eras.DRAFT_METHODS}"
    return SpeculativeConfig(
        method="ngram",
        num_speculative_tokens=config.num_speculative_tokens,
        prompt_lookup_min=NGRAM_LOOKUP_TOKENS,
        prompt_lookup_max=NGRAM_LOOKUP_TOKENS,
        target_model_config=model_config,
        target_parallel_config=parallel_config,
    )
