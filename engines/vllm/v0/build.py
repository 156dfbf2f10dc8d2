"""Construct vLLM v0's real `Scheduler` (0.5.4 or 0.6.0) with block manager v1 or v2, and
the LLMEngine's own output post-processing (SingleStepOutputProcessor + StopChecker), on a
CPU with no model. Imports vLLM; import it only from the vllm-v0 adapter.

Determinism: the v0 scheduler reads the wall clock (`time.time()` in `schedule()`), and the
block managers use that `now` as each block's last_accessed time, which orders LRU eviction.
`StepClock` replaces the scheduler module's `time` with a clock that reads the adapter's step
counter, so eviction order depends on steps, never on how fast this machine runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.engines.vllm.common import EOS_TOKEN_ID, prepare_environment
from schedcheck.engines.vllm.v0 import eras

prepare_environment()

import vllm.core.scheduler as vllm_scheduler_module  # noqa: E402
from vllm.config import CacheConfig, SchedulerConfig  # noqa: E402
from vllm.core.scheduler import Scheduler  # noqa: E402
from vllm.engine.output_processor.single_step import SingleStepOutputProcessor  # noqa: E402
from vllm.engine.output_processor.stop_checker import StopChecker  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.sequence import (  # noqa: E402
    CompletionSequenceGroupOutput,
    Logprob,
    Sequence,
    SequenceGroup,
    SequenceOutput,
)

VLLM_VERSION = eras.installed_release()
assert eras.unsupported_reason(VLLM_VERSION) is None, eras.unsupported_reason(VLLM_VERSION)
BLOCK_MANAGERS = ("v1", "v2")
DEFAULT_BLOCK_MANAGER = "v1"  # vLLM 0.5/0.6 default: use_v2_block_manager=False


class StepClock:
    """Stands in for the `time` module inside vllm.core.scheduler: reads a step counter."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def time(self) -> float:
        return self.now_s

    def perf_counter(self) -> float:
        return self.now_s

    def monotonic(self) -> float:
        return self.now_s


@dataclass(frozen=True)
class BuiltV0:
    scheduler: Scheduler
    output_processor: SingleStepOutputProcessor
    scheduler_config: SchedulerConfig
    clock: StepClock


def build_v0(config: EngineConfig) -> BuiltV0:
    """Scheduler(SchedulerConfig, CacheConfig, None) as LLMEngine.__init__ builds it, with
    num_gpu_blocks from the config and no CPU (swap) blocks."""
    block_manager = block_manager_of(config)
    scheduler_config = SchedulerConfig(
        config.max_num_batched_tokens,
        config.max_num_seqs,
        config.max_model_len,
        use_v2_block_manager=block_manager == "v2",
        enable_chunked_prefill=config.enable_chunked_prefill,
    )
    cache_config = CacheConfig(
        config.block_size, 1.0, 0, "auto", enable_prefix_caching=config.enable_prefix_caching
    )
    cache_config.num_gpu_blocks = config.num_gpu_blocks
    cache_config.num_cpu_blocks = 0
    clock = StepClock()
    vllm_scheduler_module.time = clock
    scheduler = Scheduler(scheduler_config, cache_config, None)
    stop_checker = StopChecker(config.max_model_len, get_tokenizer_for_seq=_no_tokenizer)
    output_processor = SingleStepOutputProcessor(
        scheduler_config, None, [scheduler], itertools.count(), stop_checker
    )
    return BuiltV0(scheduler, output_processor, scheduler_config, clock)


def block_manager_of(config: EngineConfig) -> str:
    """ "v1" | "v2"; EngineConfig's default ("hashed", the reference engine's) means vLLM's."""
    if config.block_manager == EngineConfig().block_manager:
        return DEFAULT_BLOCK_MANAGER
    if config.block_manager not in BLOCK_MANAGERS:
        raise ValueError(
            f"vllm-v0 block_manager must be one of {BLOCK_MANAGERS}, got {config.block_manager!r}"
        )
    return config.block_manager


def _no_tokenizer(seq: Sequence) -> None:
    raise AssertionError("detokenize=False: the stop checker never asks for a tokenizer")


def make_sequence_group(request: EngineRequest, seq_id: int, block_size: int) -> SequenceGroup:
    """One Sequence in one SequenceGroup, as LLMEngine._add_processed_request builds them
    (n=1, no beam search, no detokenization, EOS ignored)."""
    inputs = {"prompt_token_ids": request.prompt_token_ids.tolist(), "prompt": None}
    seq = Sequence(seq_id, inputs, block_size, EOS_TOKEN_ID)
    params = SamplingParams(n=1, max_tokens=request.max_tokens, ignore_eos=True, detokenize=False)
    return SequenceGroup(
        request_id=request.request_id,
        seqs=[seq],
        arrival_time=request.arrival_time_s,
        sampling_params=params,
    )


def sampler_output(seq_id: int, token_id: int) -> CompletionSequenceGroupOutput:
    """The Sampler's output for one sequence: one sample, logprob 0 (not read)."""
    sample = SequenceOutput(seq_id, token_id, {token_id: Logprob(0.0)})
    return CompletionSequenceGroupOutput(samples=[sample], prompt_logprobs=None)
