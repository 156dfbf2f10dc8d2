"""vLLM v1 scheduler options carried in `EngineConfig.extra`, validated against vLLM's own
`SchedulerConfig` fields (`--vllm-option KEY=VALUE`, and the fuzzer's swarm).

An option is stored as `extra["vllm:KEY"] = "VALUE"` (text, as every extra value is) and
turned into the field's type here when the scheduler is built:

    extra                                   SchedulerConfig field
    "vllm:max_num_scheduled_tokens" "12"    max_num_scheduled_tokens=12
    "vllm:watermark"                "0.1"   watermark=0.1
    "vllm:scheduler_reserve_full_isl" "false"  scheduler_reserve_full_isl=False
    "vllm:max_num_queued_reqs"      "none"  max_num_queued_reqs=None

Fields that an `EngineConfig` field or a flag of its own already sets (`--max-num-seqs`,
`--policy`, `--async-scheduling`, ...) are refused here, so one option has one spelling.
`max_num_queued_reqs` / `max_num_queued_tokens` are enforced by vLLM's API server, not
its scheduler (`AsyncLLM.check_admission`); the vllm-v1 adapter models that frontend.
Imports vLLM: import this module only where vLLM is wanted.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

OPTION_PREFIX = "vllm:"
# SchedulerConfig fields set from EngineConfig or a flag of their own, never by --vllm-option
OWNED_FIELDS: dict[str, str] = {
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs",
    "enable_chunked_prefill": "--no-chunked-prefill",
    "long_prefill_token_threshold": "--long-prefill-token-threshold",
    "policy": "--policy",
    "async_scheduling": "--async-scheduling",
}
# fields that name code or a model kind, not a scheduling choice: fixed by the adapter
FIXED_FIELDS = frozenset(
    {"runner_type", "scheduler_cls", "is_multimodal_model", "disable_chunked_mm_input"}
)
_NONE_WORDS = frozenset({"none", "null"})
_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def settable_fields() -> Mapping[str, str]:
    """name -> type text of every SchedulerConfig field --vllm-option may set."""
    from vllm.config import SchedulerConfig

    return _settable_fields(SchedulerConfig)


@functools.cache
def _settable_fields(scheduler_config_cls: type) -> Mapping[str, str]:
    """Read once per class (every engine build asks, twice with fit.py's probe), handed
    out read-only."""
    return MappingProxyType(
        {
            f.name: f.type.__name__ if isinstance(f.type, type) else str(f.type)
            for f in dataclasses.fields(scheduler_config_cls)
            if f.init and f.name not in OWNED_FIELDS and f.name not in FIXED_FIELDS
        }
    )


def parse_option(text: str) -> tuple[str, str]:
    """`KEY=VALUE` -> (KEY, VALUE), checked against SchedulerConfig's fields (ValueError
    names the known ones, or the flag that owns the field)."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise ValueError(f"--vllm-option {text!r}: expected KEY=VALUE")
    if key in OWNED_FIELDS:
        raise ValueError(f"--vllm-option {key}: set it with {OWNED_FIELDS[key]}")
    fields = settable_fields()
    if key not in fields:
        known = ", ".join(sorted(fields))
        raise ValueError(f"--vllm-option {key}: not a SchedulerConfig field; known: {known}")
    convert(key, value, fields[key])  # a value of the wrong type is refused now
    return key, value


def options_extra(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The EngineConfig.extra entries for (KEY, VALUE) pairs; a later KEY wins."""
    return {OPTION_PREFIX + key: value for key, value in pairs}


def scheduler_kwargs(extra: Mapping[str, str]) -> dict[str, Any]:
    """SchedulerConfig keyword arguments for the `vllm:` entries of `extra`, in key order."""
    fields = settable_fields()
    out: dict[str, Any] = {}
    for name in sorted(k for k in extra if k.startswith(OPTION_PREFIX)):
        key = name[len(OPTION_PREFIX) :]
        if key not in fields:
            raise ValueError(f"engine option {name}: not a settable SchedulerConfig field")
        out[key] = convert(key, extra[name], fields[key])
    return out


def convert(key: str, value: str, type_text: str) -> Any:
    """`value` as the field's type: None, bool, int or float by the annotation's text."""
    word = value.lower()
    if "None" in type_text and word in _NONE_WORDS:
        return None
    try:
        if "bool" in type_text:
            if word in _TRUE_WORDS | _FALSE_WORDS:
                return word in _TRUE_WORDS
            raise ValueError
        if "int" in type_text:
            return int(value)
        if "float" in type_text:
            return float(value)
    except ValueError:
        raise ValueError(f"--vllm-option {key}={value}: not a {type_text}") from None
    return value
