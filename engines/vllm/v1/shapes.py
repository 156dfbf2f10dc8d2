"""What a vLLM release must hold for the vllm-v1 adapter to drive it, checked before a run.

A release the era shims were not written for (one newer than eras.NEWEST, a developer's
main) is tried, not refused; but where it renamed or dropped something the adapter reads,
a run would fail inside the adapter. `shape_mismatches` names each such member first, with
the releases it was read in, and the factory refuses the release with them (exit 2, never
a finding):

    READ_EVERYWHERE   members of vLLM's classes the adapter reads in every release
    resumed requests  CachedRequestData.resumed_req_ids (0.11.1 to 0.33.0), or
                      .resumed_from_preemption (0.10.1.1, 0.11.0), or a NewRequestData
                      with a required prefill_token_ids (0.34.0: re-sent in full)

Class lookups only (cheap: the factory asks on every engine it builds). Imports vLLM inside
functions only.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

from schedcheck.engines.vllm.common import is_required_field
from schedcheck.engines.vllm.v1.eras import SUPPORTED_RANGE

# What the adapter reads of vLLM's classes in every release it knows (module, class,
# members: dataclass fields or class attributes and methods). Instance-only attributes
# (Request.num_computed_tokens, BlockPool.blocks) are not listed: a class cannot show them.
READ_EVERYWHERE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("vllm.v1.core.sched.output", "SchedulerOutput",
     ("scheduled_new_reqs", "scheduled_cached_reqs", "num_scheduled_tokens",
      "scheduled_spec_decode_tokens", "finished_req_ids")),
    ("vllm.v1.core.sched.output", "NewRequestData",
     ("req_id", "block_ids", "num_computed_tokens")),
    ("vllm.v1.core.sched.output", "CachedRequestData",
     ("req_ids", "new_block_ids", "num_computed_tokens")),
    ("vllm.v1.outputs", "ModelRunnerOutput", ("req_ids", "sampled_token_ids")),
    ("vllm.v1.core.sched.scheduler", "Scheduler",
     ("add_request", "schedule", "update_from_output", "finish_requests",
      "has_unfinished_requests")),
    ("vllm.v1.core.block_pool", "BlockPool",
     ("touch", "free_blocks", "get_new_blocks", "cache_full_blocks", "get_num_free_blocks",
      "reset_prefix_cache", "_maybe_evict_cached_block")),
    ("vllm.v1.core.kv_cache_utils", "KVCacheBlock", ("block_id", "ref_cnt", "block_hash")),
)  # fmt: skip


@functools.cache
def _has_member(cls: type, name: str) -> bool:
    """A dataclass field (with or without a default) or a class attribute or method.
    Remembered per class object (a release's classes do not change in a process; a test's
    stand-in class is another object)."""
    if dataclasses.is_dataclass(cls) and any(f.name == name for f in dataclasses.fields(cls)):
        return True
    return hasattr(cls, name)


def shape_mismatches() -> list[str]:
    """What the installed vLLM lacks of what the adapter reads (`READ_EVERYWHERE`) or of
    the shapes the era shims tell apart, each named with the releases it was read in;
    empty when every shim finds a shape it knows. Cheap: class lookups only."""
    problems = []
    for module, cls_name, members in READ_EVERYWHERE:  # bounded: the table
        cls = getattr(importlib.import_module(module), cls_name, None)
        if cls is None:
            problems.append(f"{module} has no {cls_name} (read in {SUPPORTED_RANGE})")
            continue
        missing = [m for m in members if not _has_member(cls, m)]
        problems += [f"{cls_name} has no {m} (read in {SUPPORTED_RANGE})" for m in missing]
    problem = _resumed_shape_problem()
    return problems if problem is None else [*problems, problem]


def _resumed_shape_problem() -> str | None:
    """How resumed requests are sent: CachedRequestData.resumed_req_ids (0.11.1 to
    0.33.0), .resumed_from_preemption (0.10.1.1, 0.11.0), or as a NewRequestData whose
    prefill_token_ids is required (0.34.0); None when one of them holds."""
    from vllm.v1.core.sched import output

    cached, new = output.CachedRequestData, output.NewRequestData
    if _has_member(cached, "resumed_req_ids") or _has_member(cached, "resumed_from_preemption"):
        return None
    fields = {f.name: f for f in dataclasses.fields(new)} if dataclasses.is_dataclass(new) else {}
    prefill = fields.get("prefill_token_ids")
    if prefill is not None and is_required_field(prefill):
        return None
    return (
        "CachedRequestData has neither resumed_req_ids (era resumed-req-ids, 0.11.1 to "
        "0.33.0) nor resumed_from_preemption (0.10.1.1, 0.11.0), and "
        "NewRequestData.prefill_token_ids is not required (era resumed-as-new-request, "
        "0.34.0): the shim resumed_req_ids cannot tell which requests were resumed"
    )
