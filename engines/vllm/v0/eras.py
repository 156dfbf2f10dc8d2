"""Per-era shims of the vllm-v0 adapter: where vLLM 0.5.4 and 0.6.0 differ in what the
adapter calls or models. Every release branch of the adapter is one shim here, listed in
`ERAS`; each picks its branch by a feature test on the installed vLLM's own classes, never
by a version number. The version only bounds the supported releases
(`unsupported_reason`); tests/engines/test_vllm_eras_static.py fails on a release
comparison anywhere else under engines/vllm/.

Imports vLLM only inside functions, and nothing of the adapter.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from dataclasses import dataclass
from types import SimpleNamespace

from schedcheck.engines.vllm.common import prepare_environment

SUPPORTED_RELEASES = ("0.5.4", "0.6.0")


@dataclass(frozen=True, slots=True)
class Era:
    """One difference between the v0 releases: the first release driven here that behaves
    the newer way, the shims of this module that handle it, and their feature test."""

    name: str
    release: str
    shims: tuple[str, ...]
    feature_test: str


ERAS: tuple[Era, ...] = (
    Era("async-output-processor", "0.6.0", ("has_async_output_processor",),
        "SingleStepOutputProcessor.process_outputs takes is_async"),
    Era("prefix-hit-inside-chunk", "0.6.0", ("runner_refuses_chunked_prefix_hits",),
        "probe: ModelInputForGPUBuilder._compute_for_prefix_cache_hit on a hit under "
        "chunked prefill (0.5.4 raises RuntimeError)"),
)  # fmt: skip


def installed_release() -> str | None:
    """The installed vLLM's version from its metadata, or None."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def unsupported_reason(release: str | None) -> str | None:
    """Why the vllm-v0 adapter cannot drive `release`, or None when it can."""
    if release not in SUPPORTED_RELEASES:
        return f"vllm-v0 drives {SUPPORTED_RELEASES}, got {release}"
    return None


@functools.cache
def has_async_output_processor() -> bool:
    """True where LLMEngine processes outputs asynchronously (0.6.0): its
    SingleStepOutputProcessor.process_outputs takes `is_async`, and
    `_process_model_outputs` frees finished groups only in a step where some finished;
    before (0.5.4), every step frees them."""
    from vllm.engine.output_processor.single_step import SingleStepOutputProcessor

    params = inspect.signature(SingleStepOutputProcessor.process_outputs).parameters
    return "is_async" in params


@functools.cache
def runner_refuses_chunked_prefix_hits() -> bool:
    """True where the v0 model runner raises on a prefix-cache hit under chunked prefill
    (0.5.4: "chunked prefill cannot be used with prefix caching now."); 0.6.0's computes a
    hit inside the chunk (runner.py models both). Probed on vLLM's own
    `ModelInputForGPUBuilder._compute_for_prefix_cache_hit` with a stand-in builder (block
    size 1, chunked prefill on) and a 2-token prompt whose first block is cached. False
    where no v0 release is installed (no engine to fit there, only draws)."""
    if unsupported_reason(installed_release()) is not None:
        return False
    prepare_environment()
    from vllm.worker.model_runner import ModelInputForGPUBuilder

    builder = SimpleNamespace(sliding_window=None, chunked_prefill_enabled=True, block_size=1)
    inter_data = SimpleNamespace(
        computed_block_nums=[0],
        is_prompt=True,
        prefix_cache_hit=False,
        context_lens=[0],
        seq_lens=[2],
        query_lens=[2],
        input_tokens=[[1, 2]],
        input_positions=[[0, 1]],
    )
    try:
        ModelInputForGPUBuilder._compute_for_prefix_cache_hit(builder, inter_data, 0, None)
    except RuntimeError:
        return True
    return False
