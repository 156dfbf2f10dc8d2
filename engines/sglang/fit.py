"""The swarm's drawn configs moved to what the sglang adapter runs (`registry.fit_config`).

- Page size. A campaign can pin SGLang's page size (`SCHEDCHECK_SGLANG_PAGE_SIZE`, e.g.
  1 or 16: the issue asks for a campaign at each): the drawn block size becomes that page
  size and `num_gpu_blocks` is converted so the pool holds at least the drawn number of
  tokens beyond the spare page (`cdiv((blocks - 1) * drawn, page) + 1`), which keeps the
  swarm's "every request fits alone" bound and its slack.
- With chunked prefill on, the token budget is rounded up to a multiple of the page size:
  SGLang refuses any other chunked_prefill_size ("chunked_prefill_size must be divisible
  by page_size", `arg_groups/validation_hook.py`; `build.server_args` checks it too).
- With chunked prefill off, max_model_len is capped at the token budget: SGLang's
  max_prefill_tokens is a soft bound ("the real bound will be the maximum of this value
  and the model's maximum context length", its `--max-prefill-tokens` help), so a prompt
  longer than the budget is admitted alone; capping the context length makes the frontend
  refuse it instead, as vLLM's fitter does.
- max_num_seqs is capped at the token budget: SGLang's budget (max_prefill_tokens,
  chunked_prefill_size) bounds prefill batches only; a decode batch runs one token for each
  of up to max_running_requests requests, so the protocol's per-step budget holds only
  with max_num_seqs <= budget, as vLLM's fitter also sets. A mixed step
  (`enable_mixed_chunk`) is within the budget by SGLang's own accounting: its PrefillAdder
  takes the running batch's size off both budgets before it admits a prefill
  (`num_mixed_decode_tokens`: rem_input_tokens and rem_chunk_tokens, scheduler.py
  `_get_new_batch_prefill_raw`), and only those requests (or fewer) join it as decode rows;
  the invariant checks that it holds, unchanged.
- Speculative decoding is off (the adapter does not model SGLang's drafter).
- `max_num_seqs` is at least 1 and SGLang's req_to_token rows are sized by it.
- `SCHEDCHECK_SGLANG_POLICY` pins SGLang's schedule policy (lpm, fcfs, dfs-weight, ...).
- `SCHEDCHECK_SGLANG_MIXED_CHUNK=on` (or `off`) pins `--enable-mixed-chunk` (EngineConfig.extra
  "enable_mixed_chunk"; it acts only where chunked prefill is on, as in SGLang), and
  `SCHEDCHECK_SGLANG_CHUNKED_PREFILL=on` (or `off`) pins chunked prefill.
- `SCHEDCHECK_SGLANG_PREFIX_CACHING=on` keeps the radix cache on: with it off, SGLang's
  ignore_eos admission path never admits a request at the memory cap its own frontend
  grants (a liveness finding, docs/sglang.md F1), which would end every campaign within
  seconds; the campaigns past F1 pin it on. The same path, with chunked prefill off, also
  admits a whole request past max_prefill_tokens (an accounting.budget finding, F8).
  `=off` pins it off (with chunked prefill pinned on: that path without F8).
"""

from __future__ import annotations

import dataclasses
import os

from schedcheck.engines.protocol import EngineConfig

PAGE_SIZE_ENV = "SCHEDCHECK_SGLANG_PAGE_SIZE"
POLICY_ENV = "SCHEDCHECK_SGLANG_POLICY"
PREFIX_CACHING_ENV = "SCHEDCHECK_SGLANG_PREFIX_CACHING"
MIXED_CHUNK_ENV = "SCHEDCHECK_SGLANG_MIXED_CHUNK"
CHUNKED_PREFILL_ENV = "SCHEDCHECK_SGLANG_CHUNKED_PREFILL"
MIXED_CHUNK_KEY = "enable_mixed_chunk"  # EngineConfig.extra: "true" = --enable-mixed-chunk
STREAMING_SESSION_KEY = "streaming_session"  # EngineConfig.extra: "true" drives sessions


def fit_config(config: EngineConfig) -> EngineConfig:
    page = int(os.environ.get(PAGE_SIZE_ENV, "0")) or config.block_size
    assert page >= 1, f"{PAGE_SIZE_ENV} must be a positive page size"
    tokens = (config.num_gpu_blocks - 1) * config.block_size
    extra = dict(config.extra)
    policy = os.environ.get(POLICY_ENV)
    if policy:
        extra["schedule_policy"] = policy
    mixed = _pinned(MIXED_CHUNK_ENV, extra.get(MIXED_CHUNK_KEY) == "true")
    if os.environ.get(MIXED_CHUNK_ENV):
        extra[MIXED_CHUNK_KEY] = "true" if mixed else "false"
    caching = _pinned(PREFIX_CACHING_ENV, config.enable_prefix_caching)
    chunked = _pinned(CHUNKED_PREFILL_ENV, config.enable_chunked_prefill)
    budget, max_model_len = config.max_num_batched_tokens, config.max_model_len
    if chunked:
        budget = -(-budget // page) * page
    else:
        max_model_len = min(max_model_len, budget)
    return dataclasses.replace(
        config,
        max_num_batched_tokens=budget,
        max_num_seqs=max(1, min(config.max_num_seqs, budget)),
        max_model_len=max_model_len,
        enable_prefix_caching=caching,
        enable_chunked_prefill=chunked,
        block_size=page,
        num_gpu_blocks=max(2, -(-tokens // page) + 1),
        num_lookahead_tokens=0,
        extra=extra,
    )


def _pinned(env: str, drawn: bool) -> bool:
    """The campaign's pin (`on` / `off`) where the environment sets one, else as drawn."""
    value = os.environ.get(env)
    if not value:
        return drawn
    assert value in ("on", "off"), f"{env} must be on or off, not {value!r}"
    return value == "on"
