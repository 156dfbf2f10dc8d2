"""The sglang adapter's factory, with what it declares it supports.

Importable without SGLang (the adapter module is imported when an engine is built), so the
fuzzer can draw configs for it where SGLang is absent.

- block sizes are SGLang page sizes 1, 4 and 16 (a campaign can pin one: `fit.py`);
- the one KV manager is SGLang's radix tree ("radix"; "hashed", every engine's default
  name, means the same here), on or off (`--no-prefix-caching` = `--disable-radix-cache`);
- the swarm draws SGLang's schedule policy (EngineConfig.extra "schedule_policy") and
  overlap scheduling, SGLang's default, on or off ("async_scheduling": `overlap.py`; on in
  every example under `--family async`), and `--enable-mixed-chunk` on or off
  ("enable_mixed_chunk": a prefill batch and the running decodes in one forward, where
  chunked prefill is on; `chunks.py` reads such a batch), and streaming sessions on or off
  ("streaming_session": a later turn continues its parent's session, KV kept: `sessions.py`);
- no priorities (priority scheduling off) and no draft tokens (no drafter);
- a request SGLang's own frontend would cut short (`init_req_max_new_tokens`: the context
  length or the KV memory budget) is rejected, so an oversize one is too;
- spare blocks 3: page 0 (SGLang's padding page) and the page + 1 token that
  `max_new_tokens_for_memory` keeps free beyond a request's prompt + outputs.
"""

from __future__ import annotations

from schedcheck.engines.capabilities import Capabilities, declare
from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, Engine, EngineConfig
from schedcheck.engines.sglang.fit import MIXED_CHUNK_KEY, STREAMING_SESSION_KEY, fit_config

SCHEDULE_POLICIES = ("fcfs", "lpm", "dfs-weight")

SGLANG_CAPABILITIES = Capabilities(
    fit_config=fit_config,
    block_sizes=(1, 4, 16),
    block_managers=("radix",),
    extra_options=(
        ("schedule_policy", SCHEDULE_POLICIES),
        (ASYNC_SCHEDULING_KEY, ("false", "true")),
        (MIXED_CHUNK_KEY, ("false", "true")),  # off first: findings shrink to the normal loop
        (STREAMING_SESSION_KEY, ("false", "true")),  # later turns continue a session's KV
    ),
    priorities=False,
    lookahead_tokens=False,
    spare_blocks=3,
)


@declare(SGLANG_CAPABILITIES)
def make_engine(config: EngineConfig) -> Engine:
    from schedcheck.engines.sglang.adapter import make_engine as make_sglang_engine

    return make_sglang_engine(config)
