"""fit_config for vllm-v1: the shared rules (common.fit_config) and those of the scheduler
options in EngineConfig.extra (engines/vllm/v1_options.py). No vLLM import: the fuzzer
fits configs while it draws.

vLLM 0.33 refuses (SchedulerConfig.verify_max_model_len):

    max_num_active_seqs > max_num_seqs

so max_num_active_seqs is capped at max_num_seqs (after max_num_seqs is capped at the
budget). Nothing else of the drawn options is refused: max_num_scheduled_tokens above the
budget, a watermark in [0, 1), any prefill_schedule_interval >= 1 and any queue limit are
accepted as drawn.
"""

from __future__ import annotations

import dataclasses

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.vllm.common import fit_config

ACTIVE_SEQS_KEY = "vllm:max_num_active_seqs"


def fit_config_v1(config: EngineConfig) -> EngineConfig:
    config = fit_config(config)
    active = config.extra.get(ACTIVE_SEQS_KEY)
    if active is None or active.lower() == "none" or int(active) <= config.max_num_seqs:
        return config
    extra = {**config.extra, ACTIVE_SEQS_KEY: str(config.max_num_seqs)}
    return dataclasses.replace(config, extra=extra)
