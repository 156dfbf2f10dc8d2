"""Building vLLM's EngineCore for the whole-engine mode, and reading its runner's metadata.

`build_engine_core`: the tiny model, dummy weights re-drawn (model.py), the shadow attention
backend selected (shadow_backend.py), in-process. `ForcedSampler`: vLLM's sampler with the
harness's tokens. `runner_metadata_of`: what vLLM's runner handed its attention backend, as
a RunnerMetadata.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.engines.protocol import EngineConfig, SchedulerOutput
from schedcheck.engines.vllm.engine import model, shadow_backend

# the KV snapshot of the vllm-v1 adapter reads vLLM's BlockPool; its module moved with
# the adapters' reorganisation: the first that imports
CPU_MEMORY_FRACTION = 0.3
SNAPSHOT_MODULES = ("schedcheck.engines.vllm.v1.snapshot", "schedcheck.engines.vllm.v1_snapshot")


def snapshot_class() -> Any:
    errors = []
    for name in SNAPSHOT_MODULES:  # bounded: two candidates
        try:
            return importlib.import_module(name).V1KVSnapshot
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError("; ".join(errors))


def engine_args(
    config: EngineConfig, model_dir: str, vocab_size: int, kernels: bool = False
) -> Any:
    """vLLM's EngineArgs for `config`: the tiny model, dummy weights, eager, the shadow
    backend (`kernels`: vLLM's own CPU attention backend, CPU_ATTN, instead)."""
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=model_dir,
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        block_size=config.block_size,
        num_gpu_blocks_override=config.num_gpu_blocks,
        enable_chunked_prefill=config.enable_chunked_prefill,
        enable_prefix_caching=config.enable_prefix_caching,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        scheduling_policy=config.extra.get("policy", "fcfs"),
        **scheduler_options(config),
        attention_backend=None if kernels else "CUSTOM",
        # on a CPU this is the share of the machine's memory the worker must find free at
        # start-up; the pool is num_gpu_blocks_override, so ask for little (the fuzzer
        # builds engine after engine in one process)
        gpu_memory_utilization=CPU_MEMORY_FRACTION,
    )


def scheduler_options(config: EngineConfig) -> dict[str, Any]:
    """EngineArgs keywords for the `vllm:` options of `config.extra`: the vllm-v1 adapter's
    parsing (engines/vllm/v1/options.py; EngineArgs names each SchedulerConfig field it
    passes on as the field itself). ValueError for one that is no settable field."""
    from vllm.engine.arg_utils import EngineArgs

    from schedcheck.engines.vllm.v1.options import scheduler_kwargs

    kwargs = scheduler_kwargs(config.extra)
    names = {f.name for f in dataclasses.fields(EngineArgs)}
    missing = sorted(set(kwargs) - names)
    if missing:
        raise ValueError(f"vllm-engine: EngineArgs takes no {', '.join(missing)}")
    return kwargs


@contextlib.contextmanager
def shadow_backend_selected() -> Iterator[None]:
    """vLLM's CUSTOM backend is ours; while the engine is built, CPU_ATTN's slot too.

    vLLM's CPU platform picks CPU_ATTN whatever backend is asked for ("Cannot use ...
    backend on CPU"), and resolves it through the same registry: overriding that entry
    for the build is how the CUSTOM backend reaches a CPU engine. Restored afterwards."""
    from vllm.v1.attention.backends import registry

    enum = registry.AttentionBackendEnum
    registry.register_backend(enum.CUSTOM, shadow_backend.CLASS_PATH)
    previous = registry._ATTN_OVERRIDES.get(enum.CPU_ATTN)
    registry.register_backend(enum.CPU_ATTN, shadow_backend.CLASS_PATH)
    try:
        yield
    finally:
        if previous is None:
            registry._ATTN_OVERRIDES.pop(enum.CPU_ATTN, None)
        else:
            registry._ATTN_OVERRIDES[enum.CPU_ATTN] = previous


@contextlib.contextmanager
def pool_size_check_skipped() -> Iterator[None]:
    """vLLM refuses at start-up a pool that cannot hold one max_model_len request; the
    fuzzer draws small pools (as the vllm-v1 adapter, which builds the Scheduler itself,
    never meets that check). A request larger than the pool is then the scheduler's to
    handle, as in vllm-v1."""
    from vllm.v1.core import kv_cache_utils

    original = kv_cache_utils._check_enough_kv_cache_memory
    kv_cache_utils._check_enough_kv_cache_memory = lambda *args, **kwargs: None
    try:
        yield
    finally:
        kv_cache_utils._check_enough_kv_cache_memory = original


def build_engine_core(
    config: EngineConfig, model_dir: str, vocab_size: int, kernels: bool = False
) -> Any:
    """vLLM's EngineCore in this process, running the shadow attention backend, or with
    `kernels` vLLM's own CPU attention kernels (CPU_ATTN: block sizes multiple of 32)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor.abstract import Executor

    model.redraw_dummy_weights()
    kernel_overrides_registered_once()
    heap_frozen_once()
    vllm_config = engine_args(config, model_dir, vocab_size, kernels).create_engine_config()
    backend = contextlib.nullcontext() if kernels else shadow_backend_selected()
    with backend, pool_size_check_skipped(), full_collections_deferred():
        return EngineCore(vllm_config, Executor.get_class(vllm_config), log_stats=False)


def shutdown_engine_core(core: Any) -> None:
    """EngineCore.shutdown, its full garbage collections left to the caller (one, once
    it has dropped its last reference to `core`)."""
    with full_collections_deferred(collect_after=False):
        core.shutdown()


_HEAP_FROZEN: list[bool] = []  # the process's imports are frozen (heap_frozen_once)


def heap_frozen_once() -> None:
    """Freeze what the process holds before its first engine (vLLM, torch, transformers
    imported: 640k objects), once: later full collections skip it (0.44 s -> 0 s here).
    Only the cycle collector ignores frozen objects; none of vLLM's state is among them."""
    if not _HEAP_FROZEN:
        gc.collect()
        gc.freeze()
        _HEAP_FROZEN.append(True)


@contextlib.contextmanager
def full_collections_deferred(collect_after: bool = True) -> Iterator[None]:
    """vLLM's engine start and shutdown call `gc.collect()` about eight times (after the
    weights load, after the profiling run, before freezing the heap, in
    cleanup_dist_env_and_memory), each a full collection of a heap that holds vLLM,
    torch and transformers (0.3-0.5 s each on this machine: 60 % of an example's time in
    a fuzz campaign's profile), and freeze the heap after start-up (`freeze_gc_heap`)
    and thaw it at shutdown: memory management only, nothing vLLM computes depends on
    it. Here the collections are counted and one runs at the end instead (`collect_after`;
    else the caller's), and the freeze is the process's own (`heap_frozen_once`): the
    engine's objects stay collectable, the imports frozen, so that one collection is
    short."""
    collect, freeze, unfreeze = gc.collect, gc.freeze, gc.unfreeze
    asked: list[int] = []

    def counted(generation: int = 2) -> int:
        asked.append(generation)
        return 0

    def nothing() -> None:
        return None

    gc.collect, gc.freeze, gc.unfreeze = counted, nothing, nothing
    try:
        yield
    finally:
        gc.collect, gc.freeze, gc.unfreeze = collect, freeze, unfreeze
        if asked and collect_after:
            gc.collect()


def kernel_overrides_registered_once() -> None:
    """vLLM's CPU worker registers its C++ fallbacks for Triton kernels at every start
    (`CpuPlatform.register_triton_kernel_overrides`): a scan of every module's namespace
    (0.5 s here) that rebinds the same implementations over the wrappers the previous
    engine's registration left. The overrides are process-wide: after the first
    registration of a process, another changes nothing but the time, so it is skipped."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    register = cls.register_triton_kernel_overrides
    if getattr(register, "schedcheck_once", False):
        return
    registered: list[bool] = []

    def once(_cls: Any) -> None:
        if not registered:
            register()
            registered.append(True)

    once.schedcheck_once = True  # type: ignore[attr-defined]
    cls.register_triton_kernel_overrides = classmethod(once)


@dataclass(frozen=True, slots=True)
class KernelSample:
    """What vLLM's model computed at one sampled row (the kernel replay compares these):
    its greedy token and runner-up with their logprobs, and the logprob of the token the
    harness forced (the sequence both runs follow)."""

    step: int
    top_ids: tuple[int, int]
    top_logprobs: tuple[float, float]
    forced_id: int
    forced_logprob: float


class ForcedSampler:
    """vLLM's sampler, with the sampled ids of the requests the harness names replaced.

    The runner's logits rows follow its persistent batch (`input_batch.req_ids`); a row of
    a request with no forced token keeps vLLM's own sample (the runner discards it: a
    partial prefill chunk). With `record`, each forced row's logits are kept as a
    KernelSample in `samples[(request id, position sampled)]` (`positions` names the
    position each request samples this step)."""

    def __init__(self, sampler: Any, input_batch_of: Any, record: bool = False) -> None:
        self.sampler = sampler
        self.input_batch_of = input_batch_of
        self.forced: Mapping[str, int] = {}
        self.record = record
        self.step = 0
        self.positions: Mapping[str, int] = {}
        self.samples: dict[tuple[str, int], KernelSample] = {}

    def __call__(self, logits: Any, sampling_metadata: Any) -> Any:
        req_ids = self.input_batch_of().req_ids
        if self.record:
            self._keep(logits, req_ids)
        out = self.sampler(logits=logits, sampling_metadata=sampling_metadata)
        ids = out.sampled_token_ids
        for row, rid in enumerate(req_ids[: ids.shape[0]]):  # bounded: the batch
            token = self.forced.get(rid)
            if token is not None:
                ids[row, 0] = int(token)
                ids[row, 1:] = -1
        return out

    def _keep(self, logits: Any, req_ids: list[str | None]) -> None:
        import torch

        logprobs = torch.log_softmax(logits.detach().to(torch.float64), dim=-1)
        top = torch.topk(logprobs, 2, dim=-1)
        for row, rid in enumerate(req_ids[: logprobs.shape[0]]):  # bounded: the batch
            token = self.forced.get(rid) if rid is not None else None
            if token is None or rid is None:
                continue
            self.samples[(rid, self.positions[rid])] = KernelSample(
                step=self.step,
                top_ids=(int(top.indices[row, 0]), int(top.indices[row, 1])),
                top_logprobs=(float(top.values[row, 0]), float(top.values[row, 1])),
                forced_id=int(token),
                forced_logprob=float(logprobs[row, int(token)]),
            )


def runner_metadata_of(
    m: shadow_backend.ShadowAttentionMetadata,
    output: SchedulerOutput,
    runner: Any,
    logits_indices: Any = None,
) -> RunnerMetadata:
    """A RunnerMetadata holding vLLM's own indices (the fields engines/metadata.py
    derives, taken from what vLLM's runner handed its attention backend)::

        query_start_loc, seq_lens, slot_mapping   <- CommonAttentionMetadata
        block_tables[i]   <- block_table_tensor[i, :ceil(seq_lens[i] / block_size)]
                             (the entries the kernel reads; vLLM pads rows with 0)
        positions, input_ids                      <- the runner's input buffers
        num_computed_tokens                       <- seq_lens - query lens
        logits_indices    <- _prepare_inputs' logits indices (one per request; those
                             of the requests that sample), else query_start_loc[1:] - 1
    """
    n = m.num_actual_tokens
    qsl, seq_lens = m.query_start_loc, m.seq_lens
    query_lens = np.diff(qsl)
    positions = m.positions if m.positions is not None else _buffer(runner.positions, n)
    input_ids = _buffer(runner.input_ids, n)
    widths = -(-seq_lens // m.block_size)
    tables = tuple(tuple(int(b) for b in m.block_table[i, : widths[i]]) for i in range(m.num_reqs))
    sampling = [i for i, r in enumerate(output.scheduled) if r.samples]
    return RunnerMetadata(
        output=output,
        block_size=m.block_size,
        req_ids=tuple(r.request_id for r in output.scheduled),
        num_computed_tokens=seq_lens - query_lens,
        query_start_loc=qsl,
        seq_lens=seq_lens,
        positions=positions,
        input_ids=input_ids,
        slot_mapping=m.slot_mapping,
        logits_indices=_logits_rows(logits_indices, qsl, sampling),
        sampling_req_ids=tuple(output.scheduled[i].request_id for i in sampling),
        block_tables=tables,
    )


def _buffer(buf: Any, n: int) -> np.ndarray:
    """The first n entries of one of the runner's input buffers, as int64."""
    tensor = getattr(buf, "cpu", buf)
    return np.asarray(tensor[:n].numpy(), dtype=np.int64).copy()


def _logits_rows(logits_indices: Any, qsl: np.ndarray, sampling: list[int]) -> np.ndarray:
    """The rows the requests that sample take their logits from, as the runner said."""
    if logits_indices is None:
        return (qsl[1:][sampling] - 1).astype(np.int64)
    rows = np.asarray(getattr(logits_indices, "cpu", lambda: logits_indices)(), dtype=np.int64)
    return rows[sampling].copy()
