"""fit_config for vllm-v1: the shared rules (common.fit_config) and those of the scheduler
options in EngineConfig.extra (engines/vllm/v1/options.py), then what the installed
release lacks (`_fit_release`). vLLM's config classes are read only where vLLM is
installed: the fuzzer fits configs while it draws, with or without vLLM.

vLLM 0.33 refuses (SchedulerConfig.verify_max_model_len):

    max_num_active_seqs > max_num_seqs

so max_num_active_seqs is capped at max_num_seqs (after max_num_seqs is capped at the
budget). Nothing else of the drawn options is refused: max_num_scheduled_tokens above the
budget, a watermark in [0, 1), any prefill_schedule_interval >= 1 and any queue limit are
accepted as drawn.

One accepted config is moved all the same, a finding of the first vllm-v1 campaign
(tests/vllm/bundles/0.33.0-v1-liveness-scheduled-tokens, tests/vllm/repro/): with chunked
prefill off, vLLM requires max_num_batched_tokens >= max_model_len so that every admitted
prompt fits one step, but not max_num_scheduled_tokens, which caps the step's tokens as
well; a prompt longer than it waits forever, and blocks the queue behind it. Reported
once, it would stop every later campaign (a liveness failure cannot be ignored), so
max_num_scheduled_tokens is raised to max_model_len there.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from schedcheck.engines.protocol import EngineConfig, is_async_scheduling
from schedcheck.engines.vllm.common import fit_config, write_tiny_model_dir
from schedcheck.engines.vllm.v1 import eras
from schedcheck.engines.vllm.v1.sessions import STREAMING_INPUT_KEY, has_streaming_input

OPTION_PREFIX = "vllm:"  # as options.OPTION_PREFIX (which imports vLLM)
ACTIVE_SEQS_KEY = "vllm:max_num_active_seqs"
SCHEDULED_TOKENS_KEY = "vllm:max_num_scheduled_tokens"


def fit_config_v1(config: EngineConfig) -> EngineConfig:
    config = _fit_release(fit_config(config))
    extra = dict(config.extra)
    active = _int_or_none(extra.get(ACTIVE_SEQS_KEY))
    if active is not None and active > config.max_num_seqs:
        extra[ACTIVE_SEQS_KEY] = str(config.max_num_seqs)
    scheduled = _int_or_none(extra.get(SCHEDULED_TOKENS_KEY))
    if not config.enable_chunked_prefill and scheduled is not None:
        extra[SCHEDULED_TOKENS_KEY] = str(max(scheduled, config.max_model_len))
    return config if extra == config.extra else dataclasses.replace(config, extra=extra)


def _fit_release(config: EngineConfig) -> EngineConfig:
    """Fit away what the installed release lacks (engines/vllm/v1/eras.py): the `vllm:`
    options its SchedulerConfig has no field for (e.g. max_num_scheduled_tokens before
    0.2x, the queue limits before 0.3x), drafts before 0.11.0 (the scheduler took
    them in ModelRunnerOutput then, which the adapter does not drive), and drafts with
    async scheduling where the release runs no drafts then (0.11.0). Where it runs them
    only with a draft model (0.12.0), the config names EAGLE as production's would
    (eras.DRAFT_METHOD_KEY); streaming-input sessions before 0.34.0. Without vLLM
    installed, nothing is moved."""
    fields = eras.scheduler_config_fields()
    if not fields:
        return config
    extra = {
        k: v
        for k, v in config.extra.items()
        if not k.startswith(OPTION_PREFIX) or k[len(OPTION_PREFIX) :] in fields
    }
    if not has_streaming_input():  # no resumable requests before 0.34.0
        extra.pop(STREAMING_INPUT_KEY, None)
    changes: dict[str, Any] = {}
    if config.num_speculative_tokens and not eras.has_draft_token_ids_api():
        changes["num_speculative_tokens"] = 0
    elif (
        config.num_speculative_tokens
        and is_async_scheduling(config)
        and eras.DRAFT_METHOD_KEY not in extra
    ):
        method = _async_draft_method()
        if method is None:
            changes["num_speculative_tokens"] = 0  # the release runs no drafts when async
        elif method != "ngram":
            extra[eras.DRAFT_METHOD_KEY] = method  # as production: a draft model (EAGLE)
    if extra != config.extra:
        changes["extra"] = extra
    config = dataclasses.replace(config, **changes) if changes else config
    return _fit_refused_spec_budget(config)


def _fit_refused_spec_budget(config: EngineConfig) -> EngineConfig:
    """0.25.0 refuses max_num_scheduled_tokens with drafts unless it leaves the drafts'
    slots in max_num_batched_tokens; probed on the config itself (vLLM's own check),
    and the option dropped where refused."""
    if not config.num_speculative_tokens or SCHEDULED_TOKENS_KEY not in config.extra:
        return config
    from schedcheck.engines.vllm.v1.build import build_vllm_config  # imports vLLM

    model_dir = write_tiny_model_dir(config.max_model_len)
    if eras.vllm_config_accepted(functools.partial(build_vllm_config, config, model_dir)):
        return config
    extra = {k: v for k, v in config.extra.items() if k != SCHEDULED_TOKENS_KEY}
    return dataclasses.replace(config, extra=extra)


def _async_draft_method() -> str | None:
    """The release's speculative method for async scheduling (eras.py's probes, on the
    adapter's own factory: the same one the engine factory asks)."""
    from schedcheck.engines.vllm.v1.adapter import make_engine  # imports vLLM

    return eras.async_draft_method(make_engine)


def _int_or_none(text: str | None) -> int | None:
    return None if text is None or text.lower() == "none" else int(text)
