"""Construct SGLang 0.5.23's real scheduler objects on a CPU, with no model worker.

What `Scheduler.__init__` would build for a dense text model, minus the model worker,
the tokenizer and the IPC sockets (SGLang's own CPU unit tests build a scheduler the same
way, with `Scheduler.__new__(Scheduler)` and the attributes its loop methods read):

- the published `ServerArgs(model_path="dummy", device="cpu", page_size=P,
  chunked_prefill_size=C, schedule_policy=..., disable_radix_cache=...,
  disable_overlap_schedule=not overlap, enable_mixed_chunk=...)` (PrefillAdder and the tree
  read the global config);
- `ReqToTokenPool(max_num_seqs, max_model_len)`: one row of KV slot indices per request;
- `TokenToKVPoolAllocator` (page size 1) or `PagedTokenToKVPoolAllocator` with
  `(num_gpu_blocks - 1) * P` slots: SGLang keeps page 0 (slots 0..P-1) for padding, as
  vLLM keeps its null block, so the shadow KV has `num_gpu_blocks * P` slots;
- the tree cache from SGLang's own factory (`mem_cache.registry.create_tree_cache`): a
  `UnifiedRadixCache` with its FULL component, disabled when the radix cache is off;
- `SchedulePolicy`, `NewTokenRatioTracker`, `SchedulerBatchResultProcessor`: SGLang's.

Everything else the loop methods read is set to its "feature off" value (no LoRA, no
HiCache, no disaggregation, no speculative decoding, no grammar, no DP attention); the
metrics reporter and output streamer are inert (they only count and send to the
tokenizer process).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig
from schedcheck.engines.sglang import stubs
from schedcheck.engines.sglang.fit import MIXED_CHUNK_KEY, STREAMING_SESSION_KEY

stubs.install()

import torch  # noqa: E402
from sglang.srt.runtime_context import SpawnRanks, publish, reset_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

SCHEDULE_POLICIES = ("lpm", "fcfs", "dfs-weight", "lof", "random")


@dataclass(frozen=True)
class SglangOptions:
    """SGLang's own knobs beyond EngineConfig (`EngineConfig.extra`, string values)."""

    schedule_policy: str = "fcfs"
    chunked_prefill_size: int | None = None  # None: max_num_batched_tokens
    # overlap scheduling (SGLang's default; EngineConfig.extra "async_scheduling"): batch
    # N+1 is scheduled and launched before N's result is processed (event_loop_overlap)
    overlap: bool = False
    # --enable-mixed-chunk (EngineConfig.extra "enable_mixed_chunk"): with chunked prefill
    # on, a prefill batch and the running decodes run as one forward (ForwardMode.MIXED)
    mixed_chunk: bool = False
    # --enable-streaming-session (EngineConfig.extra "streaming_session"): every request a
    # streaming session, a later turn continuing its parent's (sessions.py)
    streaming_session: bool = False

    @staticmethod
    def from_extra(extra: Any) -> SglangOptions:
        policy = str(extra.get("schedule_policy", "fcfs"))
        assert policy in SCHEDULE_POLICIES, f"schedule_policy {policy!r} not in {SCHEDULE_POLICIES}"
        chunk = extra.get("chunked_prefill_size")
        overlap = _flag(extra, ASYNC_SCHEDULING_KEY)
        mixed = _flag(extra, MIXED_CHUNK_KEY)
        sessions = _flag(extra, STREAMING_SESSION_KEY)
        return SglangOptions(
            policy, None if chunk is None else int(chunk), overlap, mixed, sessions
        )


def _flag(extra: Any, key: str) -> bool:
    value = str(extra.get(key, "false"))
    assert value in ("false", "true"), f"{key} {value!r} is not 'false' or 'true'"
    return value == "true"


def server_args(config: EngineConfig, options: SglangOptions) -> ServerArgs:
    chunk = options.chunked_prefill_size or config.max_num_batched_tokens
    if config.enable_chunked_prefill and chunk % config.block_size:
        raise ValueError(  # SGLang's own check (arg_groups/validation_hook.py)
            f"chunked_prefill_size {chunk} must be divisible by page_size {config.block_size}"
        )
    return ServerArgs(
        model_path="dummy",
        device="cpu",
        page_size=config.block_size,
        chunked_prefill_size=chunk if config.enable_chunked_prefill else -1,
        max_prefill_tokens=config.max_num_batched_tokens,
        max_running_requests=config.max_num_seqs,
        pp_max_micro_batch_size=config.max_num_seqs,  # what Scheduler.__init__ defaults it to
        schedule_policy=options.schedule_policy,
        disable_radix_cache=not config.enable_prefix_caching,
        disable_overlap_schedule=not options.overlap,
        enable_mixed_chunk=options.mixed_chunk,  # Scheduler: only with chunked prefill on
        enable_streaming_session=options.streaming_session,
        random_seed=0,
    )


def publish_server_args(args: ServerArgs) -> None:
    """SGLang reads its config from one process-wide context; this adapter is its owner."""
    reset_context()
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))


from sglang.srt.managers.scheduler import PAUSE_WINDOWS_MAX, Scheduler  # noqa: E402
from sglang.srt.managers.scheduler_components.batch_result_processor import (  # noqa: E402
    SchedulerBatchResultProcessor,
)
from sglang.srt.managers.scheduler_components.logprob_result_processor import (  # noqa: E402
    SchedulerLogprobResultProcessor,
)
from sglang.srt.mem_cache.allocator import (  # noqa: E402
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache  # noqa: E402
from sglang.srt.session.session_controller import SessionController  # noqa: E402


class _Inert:
    """Metrics reporter / output streamer stand-in: every method is a no-op; counters
    SGLang increments (`num_generated_tokens`, ...) start at 0."""

    enable_metrics = False
    current_scheduler_metrics_enabled = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("num_") or name.startswith("forward_ct"):
            return 0
        return _noop


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class _ModelConfig:
    """The fields the scheduler path reads of a text-only decoder's ModelConfig (no
    reasoning markers: think_end_ids empty)."""

    vocab_size = 1 << 30  # hash-model tokens are < 2**30 (traces/tokens.py)
    is_encoder_decoder = False
    is_multimodal = False
    num_key_value_heads = 1
    self_opened_think_start_ids: tuple[int, ...] = ()
    think_end_ids: tuple[int, ...] = ()


def build_pools(config: EngineConfig) -> tuple[ReqToTokenPool, Any]:
    page = config.block_size
    size = (config.num_gpu_blocks - 1) * page
    assert size >= page, "SGLang needs one page beyond its reserved page 0"
    req_to_token_pool = ReqToTokenPool(
        size=config.max_num_seqs,
        max_context_len=config.max_model_len + page,
        device="cpu",
        enable_memory_saver=False,
    )
    if page == 1:
        allocator: Any = TokenToKVPoolAllocator(
            size, dtype=torch.float16, device="cpu", kvcache=None, need_sort=False
        )
    else:
        allocator = PagedTokenToKVPoolAllocator(
            size, page, dtype=torch.float16, device="cpu", kvcache=None, need_sort=False
        )
    return req_to_token_pool, allocator


def build_tree_cache(args: ServerArgs, config: EngineConfig, pool: Any, allocator: Any) -> Any:
    params = CacheInitParams(
        disable=not config.enable_prefix_caching,
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=allocator,
        page_size=config.block_size,
        chunked_prefill_size=args.chunked_prefill_size,
    )
    context = TreeCacheBuildContext(
        server_args=args,
        params=params,
        is_hybrid_swa=False,
        is_hybrid_ssm=False,
        enable_hierarchical_cache=False,
        disable_radix_cache=not config.enable_prefix_caching,
        tp_worker=None,
        model_config=_ModelConfig(),
        tp_size=1,
        tp_rank=0,
        tp_group=None,
    )
    return count_evictions(create_tree_cache(context))


def count_evictions(tree_cache: Any) -> Any:
    """`tree_cache` whose evictions (SGLang's two entry points: `evict`, the evict fault's
    and the idle path's, and `evict_for_alloc`, the allocator's) add the tokens they evicted
    to `num_evicted_slots`: the snapshot's num_evicted_blocks, coverage's evict-cached-block."""
    tree_cache.num_evicted_slots = 0
    for name in ("evict", "evict_for_alloc"):  # bounded: two methods
        setattr(tree_cache, name, _counted(tree_cache, getattr(tree_cache, name)))
    return tree_cache


def _counted(tree_cache: Any, evict: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        result = evict(*args, **kwargs)
        tree_cache.num_evicted_slots += int(result.num_tokens_evicted)
        return result

    return counted


def build_scheduler(config: EngineConfig, options: SglangOptions) -> Scheduler:
    """A `Scheduler` made with `__new__`, holding SGLang's own pools, tree and policy."""
    args = server_args(config, options)
    publish_server_args(args)
    pool, allocator = build_pools(config)
    tree_cache = build_tree_cache(args, config, pool, allocator)
    s = Scheduler.__new__(Scheduler)
    s.server_args = args
    s.model_config = _ModelConfig()
    s.page_size = config.block_size
    s.req_to_token_pool = pool
    s.token_to_kv_pool_allocator = allocator
    s.tree_cache = tree_cache
    s.session_controller = SessionController(tree_cache)  # open_session, close_session
    s.max_total_num_tokens = allocator.size
    s.max_req_len = config.max_model_len
    s.max_running_requests = config.max_num_seqs
    s.max_prefill_tokens = config.max_num_batched_tokens
    _set_features_off(s)
    s.enable_overlap = options.overlap
    s.schedule_policy = options.schedule_policy
    s.init_schedule_policy()
    s.init_running_status()
    _init_chunked_prefill(s, args)
    s.enable_skip_finishing_decode = options.overlap  # as event_loop_overlap sets it
    s.batch_result_processor = _result_processor(s)
    return s


def _init_chunked_prefill(s: Scheduler, args: ServerArgs) -> None:
    """`Scheduler.init_chunked_prefill` for a text-only model (its multimodal branch
    resolves the model architecture, which needs a model on disk)."""
    chunk = args.chunked_prefill_size
    s.chunked_prefill_size = chunk if chunk is not None and chunk > 0 else None
    s.prefill_decode_interval = args.prefill_decode_interval or 0
    s._prefill_decode_interval_remaining = 0
    s.prefill_decode_interval_min_bs = args.prefill_decode_interval_min_bs
    s.chunked_req = None
    s._pending_chunked_abort_req = None
    s.is_mixed_chunk = s.chunked_prefill_size is not None and args.enable_mixed_chunk


class _PassThrough:
    """DP-attention adapter / n-gram embedding manager of a single-rank, text-only server:
    each hook hands the batch back unchanged (what they do with those features off)."""

    def maybe_prepare_mlp_sync_batch(self, batch: Any, need_sync: bool = False) -> Any:
        return batch

    def maybe_convert_decode_to_extend(self, batch: Any) -> Any:
        return batch

    def prepare_for_forward(self, batch: Any, chunked_req: Any = None) -> Any:
        return batch


class _NoGrammar:
    def has_waiting_grammars(self) -> bool:
        return False

    def abort_requests(self, recv_req: Any) -> None:
        return None


class _NoPendingTokens:
    def _get_num_pending_tokens(self, chunk_deduct: int = 0) -> int:
        return 0


class _ModelRunner:
    prefill_aware_swa = False
    attn_backend = None  # no extend_attention_block_m: the scheduler's fallback, 64


class _TpWorker:
    model_runner = _ModelRunner()


def _set_features_off(s: Scheduler) -> None:
    from types import SimpleNamespace

    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    off: dict[str, Any] = dict(
        enable_hierarchical_cache=False,
        enable_priority_scheduling=False,
        schedule_low_priority_values_first=False,
        abort_on_priority_when_disabled=False,
        dllm_config=None,
        enable_hisparse=False,
        hisparse_coordinator=None,
        require_mlp_sync=False,
        min_free_slots_delayer=None,
        is_hybrid_swa=False,
        dynamic_chunk_sizer=None,
        enable_lora=False,
        lora_drainer=None,
        enable_hicache_storage=False,
        enable_lmcache=False,
        enable_unified_cache_external_linker=False,
        truncation_align_size=None,
        enable_overlap=False,
        enable_overlap_mlx=False,
        decode_offload_manager=None,
        mm_receiver=None,
        is_generation=True,
        draft_worker=None,
        model_worker=None,
        max_new_tokens_limit=None,
        max_queued_requests=None,
        sliding_window_size=None,
        rust_server=None,
        future_map=None,
        processed_tokens_counter=0,
        metrics_collector=None,
        scheduler_stage_metrics=None,
        priority_scheduling_preemption_threshold=0,
        enable_fpm=False,
        enable_session_radix_cache=False,  # streaming sessions keep KV in their own slots
        # not paused (pause_generation / continue_generation: a weight update's pause)
        _engine_paused=False,
        _pause_started_at=None,
        _pause_intervals=deque(maxlen=PAUSE_WINDOWS_MAX),  # as SGLang bounds it
        cur_batch_for_debug=None,
    )
    for name, value in off.items():
        setattr(s, name, value)
    s.disaggregation_mode = DisaggregationMode.NULL
    s.spec_algorithm = SpeculativeAlgorithm.NONE
    s.metrics_reporter = _Inert()
    s.output_streamer = _Inert()
    s.kv_events_publisher = _Inert()
    s.ipc_channels = SimpleNamespace(send_to_tokenizer=_Inert())
    s.dp_attn_adapter = _PassThrough()
    s.ngram_embedding_manager = _PassThrough()
    s.grammar_manager = _NoGrammar()
    s.load_inquirer = _NoPendingTokens()
    s.tp_worker = _TpWorker()


def _result_processor(s: Scheduler) -> SchedulerBatchResultProcessor:
    s.init_beam_coordinator()
    return SchedulerBatchResultProcessor(
        is_generation=True,
        disaggregation_mode=s.disaggregation_mode,
        enable_overlap=s.enable_overlap,
        enable_overlap_mlx=False,
        model_config=s.model_config,
        token_to_kv_pool_allocator=s.token_to_kv_pool_allocator,
        tree_cache=s.tree_cache,
        hisparse_coordinator=None,
        req_to_token_pool=s.req_to_token_pool,
        decode_offload_manager=None,
        metrics_collector=None,
        metrics_reporter=s.metrics_reporter,
        draft_worker=None,
        model_worker=None,
        logprob_result_processor=SchedulerLogprobResultProcessor(model_config=s.model_config),
        output_streamer=s.output_streamer,
        beam_coordinator=s.beam_coordinator,
        abort_request=s.abort_request,
    )
