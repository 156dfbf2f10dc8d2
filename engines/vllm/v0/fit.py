"""fit_config for vllm-v0: the shared rules (common.fit_config), and for chunked prefill
with prefix caching what the installed release's runner and scheduler accept (eras.py)."""

from __future__ import annotations

import dataclasses

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.vllm.common import fit_config
from schedcheck.engines.vllm.v0 import eras


def fit_config_v0(config: EngineConfig) -> EngineConfig:
    """fit_config, and for chunked prefill with prefix caching:
    - 0.5.x: chunked prefill off. That version's model runner raises on the first prefix
      hit under chunked prefill ("chunked prefill cannot be used with prefix caching
      now", model_runner.py L354-385), so the fuzzer draws each of the two alone there;
    - 0.6.x: a budget that is a multiple of block_size, rounded up (the scheduler raises
      otherwise when it chunks a prompt, `_get_num_new_tokens`, scheduler.py L1466-1479).
    Without a v0 release installed, 0.6.x's rule (nothing is built, only drawn).
    """
    if config.enable_chunked_prefill and config.enable_prefix_caching:
        if eras.runner_refuses_chunked_prefix_hits():
            config = dataclasses.replace(config, enable_chunked_prefill=False)
        else:
            bs = config.block_size
            budget = -(-config.max_num_batched_tokens // bs) * bs
            config = dataclasses.replace(config, max_num_batched_tokens=budget)
    return fit_config(config)
