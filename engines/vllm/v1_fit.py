"""fit_config for vllm-v1: the shared rules (common.fit_config) and those of the scheduler
options in EngineConfig.extra (engines/vllm/v1_options.py). No vLLM import: the fuzzer
fits configs while it draws.

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

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.vllm.common import fit_config

ACTIVE_SEQS_KEY = "vllm:max_num_active_seqs"
SCHEDULED_TOKENS_KEY = "vllm:max_num_scheduled_tokens"


def fit_config_v1(config: EngineConfig) -> EngineConfig:
    config = fit_config(config)
    extra = dict(config.extra)
    active = _int_or_none(extra.get(ACTIVE_SEQS_KEY))
    if active is not None and active > config.max_num_seqs:
        extra[ACTIVE_SEQS_KEY] = str(config.max_num_seqs)
    scheduled = _int_or_none(extra.get(SCHEDULED_TOKENS_KEY))
    if not config.enable_chunked_prefill and scheduled is not None:
        extra[SCHEDULED_TOKENS_KEY] = str(max(scheduled, config.max_model_len))
    return config if extra == config.extra else dataclasses.replace(config, extra=extra)


def _int_or_none(text: str | None) -> int | None:
    return None if text is None or text.lower() == "none" else int(text)
