"""Where a prefill chunk may end: the block-alignment rules, one per `chunk_align` mode.

What vLLM v1 does today (`vllm/v1/core/sched/scheduler.py`): the chunk is cut only by the
token budget and `long_prefill_token_threshold`; it does *not* have to end on a block
boundary, even with prefix caching. That is safe because a block is cached only once it is
full (the cache-hit length is a whole number of blocks, and a partly written block is never
offered), so the cached length a chunk relies on never exceeds what was written (vllm#7753).
vLLM v1 aligns in two opt-in cases only: `--deterministic-prefix-caching` (a cache-miss
prefill stops at the prompt's last block boundary, so the suffix runs with the same shape as
on a cache hit) and Mamba "align" mode. vLLM v0 after vllm#7753 required every non-final
chunk to end on a block boundary when prefix caching was on.

Modes (EngineConfig.extra["chunk_align"]), applied only with prefix caching on:

- "none" (default, vLLM v1): no alignment.
- "block" (vLLM v0 after vllm#7753): a non-final chunk ends on a block boundary::

      block_size 16, num_computed 32, budget 40, num_tokens 100
      | computed      | chunk: 32 .. 72 -> 32 .. 64 |  (72 is not a boundary: cut to 64)
      0              32                            64

  A chunk that would shrink to 0 tokens is not scheduled this step.
- "deterministic" (vLLM v1 --deterministic-prefix-caching): while no output exists, a
  chunk that would cross the prompt's last block boundary stops at it::

      num_prompt_tokens 100, block_size 16 -> boundary 96
      chunk 0 .. 100 -> 0 .. 96, then 96 .. 100 in the next step
"""

from __future__ import annotations

CHUNK_ALIGN_MODES = ("none", "block", "deterministic")


def align_chunk(
    mode: str,
    block_size: int,
    num_computed_tokens: int,
    num_new_tokens: int,
    num_tokens: int,
    num_prompt_tokens: int,
) -> int:
    """The chunk length after the alignment rule of `mode` (0: cannot run this step)."""
    assert num_new_tokens >= 1 and num_computed_tokens + num_new_tokens <= num_tokens
    end_tokens = num_computed_tokens + num_new_tokens
    if mode == "block":
        if end_tokens < num_tokens:
            end_tokens = end_tokens // block_size * block_size
        return max(0, end_tokens - num_computed_tokens)
    if mode == "deterministic":
        if num_tokens > num_prompt_tokens:  # outputs exist: not a first prefill
            return num_new_tokens
        remainder = num_prompt_tokens % block_size
        if remainder == 0 or num_prompt_tokens <= block_size:
            return num_new_tokens
        boundary_tokens = num_prompt_tokens - remainder
        if num_computed_tokens < boundary_tokens < end_tokens:
            return boundary_tokens - num_computed_tokens
        return num_new_tokens
    assert mode == "none"
    return num_new_tokens
