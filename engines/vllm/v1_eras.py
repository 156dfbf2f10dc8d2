"""Per-era shims of the vllm-v1 adapter: where vLLM v1 releases 0.10.1.1 to 0.33.0 differ
in what the adapter calls or reads. Each shim picks its branch by a feature test on the
installed vLLM (a field, a parameter, a function that exists), never by a version number;
the version only bounds the supported range (`check_release`, before vLLM is imported).

    what differs                       older releases               newer releases
    CachedRequestData resumed          resumed_from_preemption      resumed_req_ids (0.11.1)
                                       (list[bool], per request)
    SchedulerOutput.preempted_req_ids  absent (< 0.12.0): derived   present (0.12.0)
                                       from the statuses
    Scheduler(...)                     no block_size (< 0.11.1)     block_size (0.11.1),
                                                                    hash_block_size (0.2x)
    scheduler class                    scheduler_cls text (< 0.11.1) get_scheduler_cls()
    ModelRunnerOutput                  every field required (< 0.2x) defaults
      sampled_token_ids                list[np.ndarray] in 0.11.1   list[list[int]]
      drafts                           spec_token_ids (0.10.1.1)    DraftTokenIds (0.11.0)
    Request(...)                       eos_token_id, multi_modal_*  neither (0.2x)
                                       (0.10.1.1) required
    finish_requests()                  returns None (< 0.2x)        (id, client) pairs (0.2x),
                                                                    the Requests (0.3x)
    get_hash_fn_by_name                vllm.utils (< 0.11.1)        vllm.utils.hashing
    BlockHashWithGroupId               NamedTuple of an int hash    bytes (0.11.0)
                                       (0.10.1.1)
    AttentionSpec                      use_mla required (0.10.1.1)  no use_mla
    ModelConfig                        v0's async output processor  none
                                       (0.10.1.1: turned off)
    sliding-window frees               remove_skipped_blocks only   _remove_blocks_in_range
    Scheduler.schedule()               no argument (every release takes none)

docs/bisect.md has the table with the releases each row was read in. Imports vLLM only
inside functions; `check_release` imports none (the factory calls it first).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

OLDEST, NEWEST = "0.10.1.1", "0.33.0"
SUPPORTED_RANGE = f"{OLDEST} to {NEWEST}"


def release_key(release: str) -> tuple[int, ...]:
    """'0.10.1.1' -> (0, 10, 1, 1); a local or dev suffix ('0.12.0+cpu') is dropped."""
    head = release.split("+")[0]
    return tuple(int(p) for p in head.split(".") if p.isdigit())


def installed_release() -> str | None:
    """The installed vLLM's version from its metadata (importing vLLM is slow), or None."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def unsupported_reason(release: str | None) -> str | None:
    """Why the vllm-v1 adapter cannot drive `release`, or None when it can."""
    if release is None:
        return "vLLM is not installed"
    if not release_key(OLDEST) <= release_key(release) <= release_key(NEWEST):
        return f"vllm-v1 drives vLLM {SUPPORTED_RANGE}; installed: {release}"
    return None


def has_field(cls: type, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(cls))


def has_param(func: Callable[..., Any], name: str) -> bool:
    return name in inspect.signature(func).parameters


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


def scheduler_init_kwargs(block_size: int) -> dict[str, int]:
    """block_size (0.11.1 on) and hash_block_size (0.2x on), where Scheduler.__init__ takes
    them (read on Scheduler: AsyncScheduler's takes *args, **kwargs)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    init = Scheduler.__init__
    names = ("block_size", "hash_block_size")
    return {n: block_size for n in names if has_param(init, n)}


def model_config_kwargs(model_config_cls: type) -> dict[str, Any]:
    """use_async_output_proc=False where ModelConfig has it (0.10.1.1: v0's output
    processor, which asks the platform; with no CUDA the platform is unspecified and
    raises NotImplementedError). The v1 scheduler never reads it."""
    name = "use_async_output_proc"
    return {name: False} if has_param(model_config_cls, name) else {}


def attention_spec_kwargs(spec_cls: type) -> dict[str, Any]:
    """use_mla=False where AttentionSpec requires it (0.10.1.1)."""
    return {"use_mla": False} if has_field(spec_cls, "use_mla") else {}


def scheduler_config_fields() -> frozenset[str]:
    """The installed SchedulerConfig's init fields (options a release lacks are fitted
    away); empty when vLLM is not installed."""
    if installed_release() is None:
        return frozenset()
    from vllm.config import SchedulerConfig

    return frozenset(f.name for f in dataclasses.fields(SchedulerConfig) if f.init)


def has_draft_token_ids_api() -> bool:
    """True where the scheduler takes drafts by update_draft_token_ids (0.11.0 on); before,
    drafts came in ModelRunnerOutput.spec_token_ids, which this adapter does not drive."""
    from vllm.v1.core.sched.scheduler import Scheduler

    return hasattr(Scheduler, "update_draft_token_ids")


def vllm_config_accepted(config: Any) -> bool:
    """Whether the release's VllmConfig accepts this EngineConfig (its own validation)."""
    from schedcheck.engines.vllm import v1_build
    from schedcheck.engines.vllm.common import write_tiny_model_dir

    try:
        v1_build._vllm_config(config, write_tiny_model_dir(config.max_model_len))
    except ValueError:  # pydantic's ValidationError is one
        return False
    return True


@functools.cache
def async_drafts_accepted() -> bool:
    """Whether the release runs async scheduling with n-gram drafts: its VllmConfig accepts
    the pair (0.12.0 refuses: "only supported with EAGLE/MTP") and its AsyncScheduler
    schedules draft placeholders (0.11.0's does not: "TODO: Support speculative
    decoding"). Probed once: one request's prefill, then its first decode must carry a
    draft."""
    import numpy as np

    from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig, EngineRequest
    from schedcheck.engines.vllm_v1 import VllmV1Engine

    config = EngineConfig(
        block_size=4,
        num_gpu_blocks=8,
        max_num_batched_tokens=16,
        max_num_seqs=2,
        max_model_len=16,
        num_speculative_tokens=1,
        extra={ASYNC_SCHEDULING_KEY: "true"},
    )
    try:
        engine = VllmV1Engine(config)
    except ValueError:  # pydantic's ValidationError is one
        return False
    prompt = np.arange(1, 5, dtype=np.int64)
    engine.add_request(EngineRequest(request_id="probe", prompt_token_ids=prompt, max_tokens=4))
    engine.schedule()  # the prefill
    (decode,) = engine.schedule().scheduled  # scheduled before the prefill's token is back
    return decode.num_draft_tokens > 0


# ------------------------------------------------------------------ requests --
def request_kwargs(request_cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """kwargs plus the parameters an older Request requires (set to None: no EOS, the
    stop is max_tokens with ignore_eos; no multimodal input)."""
    params = inspect.signature(request_cls.__init__).parameters  # type: ignore[misc]
    out = dict(kwargs)
    for name in ("eos_token_id", "multi_modal_kwargs", "multi_modal_hashes"):
        if name in params:
            out[name] = None
    if "multi_modal_placeholders" in params:
        out["multi_modal_placeholders"] = None
    unknown = set(out) - set(params)
    assert not unknown, f"Request() takes none of {sorted(unknown)}"
    return out


def finished_ids(returned: Iterable[Any] | None, request_id: str) -> list[str]:
    """The ids finish_requests reports: the Requests (0.3x), (request_id, client_index)
    pairs (0.2x); older releases return None."""
    if returned is None:
        return [request_id]
    return [r[0] if isinstance(r, tuple) else r.request_id for r in returned]


# ------------------------------------------------------------------ outputs --
def resumed_req_ids(cached: Any) -> set[str]:
    """The ids of CachedRequestData resumed from preemption this step."""
    if hasattr(cached, "resumed_req_ids"):
        return set(cached.resumed_req_ids)
    flags = cached.resumed_from_preemption
    assert len(flags) == len(cached.req_ids)
    return {rid for rid, resumed in zip(cached.req_ids, flags, strict=True) if resumed}


def runner_output(output_cls: type, req_ids: list[str], sampled: list[list[int]]) -> Any:
    """A ModelRunnerOutput with our sampled tokens; fields an older release requires get
    what its own EMPTY_MODEL_RUNNER_OUTPUT holds (no logprobs, no pooler output)."""
    fields = {f.name: f for f in dataclasses.fields(output_cls)}
    as_arrays = "ndarray" in str(fields["sampled_token_ids"].type)  # 0.11.1
    kwargs: dict[str, Any] = {
        "req_ids": req_ids,
        "req_id_to_index": {rid: i for i, rid in enumerate(req_ids)},
        "sampled_token_ids": [np.asarray(s, dtype=np.int64) for s in sampled]
        if as_arrays
        else sampled,
    }
    required: dict[str, Any] = {
        "spec_token_ids": None,
        "logprobs": None,
        "prompt_logprobs_dict": {},
        "pooler_output": [],  # a generate runner's: a non-empty list means pooling
    }
    for name, value in required.items():
        field = fields.get(name)
        if field is not None and _is_required(field):
            kwargs[name] = value
    return output_cls(**kwargs)


def _is_required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


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


@functools.cache
def _get_block_hash() -> Callable[[Any], Any]:
    from vllm.v1.core.kv_cache_utils import get_block_hash

    return get_block_hash
