"""What vLLM v0's GPU model runner derives from one SequenceGroupMetadata, per release.

The v0 scheduler hands the runner `token_chunk_size`, `seq_data` (num_computed_tokens,
token ids) and `computed_block_nums`; the runner turns them into `context_len` (KV read from
the cache) and `seq_len` (context + query). On a prefix-cache hit it moves context_len
forward over the computed blocks, and the two releases differ there (the era
`prefix-hit-inside-chunk` of eras.py: 0.6.0's runner computes a hit inside a chunk, 0.5.4's
refuses one under chunked prefill). This module is a
line-by-line model of those two functions of `vllm/worker/model_runner.py`
(`ModelInputForGPUBuilder._compute_lens` and `._compute_for_prefix_cache_hit`), with no
sliding window (prefix caching refuses one) and one sequence per group (n=1, no beam).
Nothing here imports vLLM; tests/vllm/ checks it against the real methods of each release.

The flash-attn backend (`attention/backends/flash_attn.py`, `_add_seq_group`) then passes the
full block table whenever chunked prefill is on or any request of the batch hit the cache,
and writes slots [context_len, seq_len) through it (`compute_slot_mapping`), which is what
`ScheduledRequest(block_table, num_computed_tokens=context_len,
num_scheduled_tokens=seq_len - context_len)` says. (Chunked prefill off and no hit in the
batch: flash-attn gets an empty table and runs plain varlen attention over the chunk; with
context_len 0 that reads the same KV, so the full table is still exact there.)

    prompt tokens  | computed (seq_data) | scheduler chunk (token_chunk_size) |
                   0             num_computed_tokens                    seq_len
    hit branch:    |<-- computed_block_nums * block_size -->|
                                       runner context_len ^ (moved forward)
"""

from __future__ import annotations

from dataclasses import dataclass

V054_CHUNKED_HIT_ERROR = "chunked prefill cannot be used with prefix caching now."


class RunnerInputError(RuntimeError):
    """The runner of this vLLM release would build an impossible query for a sequence."""


@dataclass(frozen=True, slots=True)
class RunnerSeqInputs:
    """The runner's view of one sequence in one step (counts, positions are [context, seq))."""

    context_len: int  # tokens whose KV the step reads from the cache
    seq_len: int  # context_len + query length
    prefix_cache_hit: bool  # `inter_data.prefix_cache_hit`
    hit_moved_context: bool  # the hit branch advanced context_len past num_computed_tokens

    @property
    def query_len(self) -> int:
        return self.seq_len - self.context_len


def runner_seq_inputs(
    *,
    hits_inside_chunks: bool,
    is_prompt: bool,
    num_computed_tokens: int,
    seq_data_len: int,
    token_chunk_size: int,
    num_computed_blocks: int,
    block_size: int,
    chunked_prefill_enabled: bool,
) -> RunnerSeqInputs:
    """context_len and seq_len as the release's model runner computes them:
    `hits_inside_chunks` 0.6.0's, else 0.5.4's (eras.runner_refuses_chunked_prefix_hits)."""
    assert token_chunk_size >= 1 and block_size >= 1 and num_computed_blocks >= 0
    context_len, seq_len = _compute_lens(
        is_prompt, num_computed_tokens, seq_data_len, token_chunk_size
    )
    hit = num_computed_blocks > 0 and is_prompt  # sliding_window is None
    if hit and not hits_inside_chunks:
        new_context = _prefix_hit_v054(
            context_len, num_computed_blocks, block_size, chunked_prefill_enabled
        )
    elif hit:
        new_context = _prefix_hit_v060(context_len, seq_len, num_computed_blocks * block_size)
    else:
        new_context = context_len
    out = RunnerSeqInputs(new_context, seq_len, hit, new_context != context_len)
    if out.query_len < 1:
        release = _release(hits_inside_chunks)
        raise RunnerInputError(
            f"vLLM {release} model runner: empty query (context_len {out.context_len}, "
            f"seq_len {seq_len}, {num_computed_blocks} computed blocks)"
        )
    return out


def _release(hits_inside_chunks: bool) -> str:
    """The release whose runner is modelled, for messages."""
    return "0.6.0" if hits_inside_chunks else "0.5.4"


def _compute_lens(
    is_prompt: bool, num_computed_tokens: int, seq_data_len: int, token_chunk_size: int
) -> tuple[int, int]:
    """`_compute_lens` (0.5.4 model_runner.py L318-352, 0.6.0 L448-494): a prompt starts at
    seq_data's num_computed_tokens; a decode at seq_len - 1 ("get_num_computed_tokens is
    incorrect for spec decoding"); seq_len = min(len, context_len + token_chunk_size)."""
    context_len = num_computed_tokens if is_prompt else seq_data_len - 1
    seq_len = min(seq_data_len, context_len + token_chunk_size)
    return context_len, seq_len


def _prefix_hit_v054(
    context_len: int, num_computed_blocks: int, block_size: int, chunked_prefill_enabled: bool
) -> int:
    """0.5.4 `_compute_for_prefix_cache_hit` (L354-385): refuses a hit under chunked prefill
    (RuntimeError, L369-371); else context_len = len(computed_block_nums) * block_size, and
    the tokens and positions are sliced by that count *relative to the chunk start* (L378-382),
    which equals the absolute context only when the chunk starts at 0."""
    if chunked_prefill_enabled:
        raise RuntimeError(V054_CHUNKED_HIT_ERROR)
    prefix_len = num_computed_blocks * block_size
    if context_len != 0:
        raise RunnerInputError(
            f"vLLM 0.5.4 model runner: prefix hit on a chunk starting at {context_len}: "
            f"positions would start at {context_len + prefix_len}, context_len at {prefix_len}"
        )
    return prefix_len


def _prefix_hit_v060(context_len: int, seq_len: int, prefix_cache_len: int) -> int:
    """0.6.0 `_compute_for_prefix_cache_hit` (L496-552): hit behind the chunk -> no change;
    hit inside the chunk -> context_len = prefix_cache_len (L530-540); hit covering the whole
    chunk -> compute only the last token, context_len = seq_len - 1 (L541-552)."""
    if prefix_cache_len <= context_len:
        return context_len
    if prefix_cache_len < seq_len:
        return prefix_cache_len
    return seq_len - 1
