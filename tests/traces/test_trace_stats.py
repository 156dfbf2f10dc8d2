"""Trace statistics: the README's facts on the real Mooncake traces, and the prefix trie's
rules on hand-built prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedcheck.traces import TraceRequest, iter_trace
from schedcheck.traces.prefix import PrefixTrie
from schedcheck.traces.stats import LengthSummary, compute_stats


def test_mooncake_conversation_stats(real_traces: Path) -> None:
    stats = compute_stats(iter_trace(real_traces / "mooncake/conversation_trace.jsonl.xz"))
    assert stats.requests == 12_031
    assert stats.time_span_s == 3536.999
    assert stats.arrival_rate_per_s == 12_031 / 3536.999
    assert stats.prompt_tokens == 144_793_823
    assert stats.prefix_hit_tokens == 54_098_411
    assert stats.prefix_hit_ratio == 54_098_411 / 144_793_823  # 37.36%
    assert abs(stats.prefix_hit_ratio - 0.374) <= 0.01 * 0.374
    assert stats.input_length.p50 == 6909.0 and stats.input_length.max == 126_195
    assert round(stats.input_length.mean) == 12_035 and round(stats.output_length.mean) == 343
    assert (stats.sessions, stats.later_turns, stats.aborts) == (0, 0, 0)


def test_mooncake_synthetic_stats(real_traces: Path) -> None:
    stats = compute_stats(iter_trace(real_traces / "mooncake/synthetic_trace.jsonl.xz"))
    assert stats.requests == 3_993
    assert stats.time_span_s == 1022.025
    assert round(stats.input_length.mean) == 15_325
    assert round(stats.prefix_hit_ratio, 3) == 0.651


def test_imported_azure_has_no_prefix_sharing(real_traces: Path) -> None:
    stats = compute_stats(iter_trace(real_traces / "azure2023/AzureLLMInferenceTrace_conv.csv.xz"))
    assert (stats.requests, stats.prefix_hit_tokens, stats.prompt_tokens) == (19_366, 0, 22_361_870)


def tokens(request_id: str, *ids: int) -> TraceRequest:
    return TraceRequest(request_id, 0.0, 1, prompt_token_ids=ids)


def test_token_prompts_hit_in_full_blocks_only() -> None:
    trie = PrefixTrie(token_block_size=4)
    assert trie.hit_tokens(tokens("a", 1, 2, 3, 4, 5, 6, 7, 8)) == 0
    assert trie.hit_tokens(tokens("b", 1, 2, 3, 4, 9, 9, 9, 9)) == 4  # first block only
    assert trie.hit_tokens(tokens("c", 1, 2, 3, 4, 5, 6, 7, 8, 10)) == 8
    assert trie.hit_tokens(tokens("d", 1, 2, 3, 4, 5, 6, 7, 8, 10)) == 8  # partial block: never
    assert trie.hit_tokens(tokens("e", 9, 9, 9, 9)) == 0  # same block, other context
    assert trie.num_blocks == 4  # 1234, 1234>5678, 1234>9999, 9999


def hashed(request_id: str, input_length: int, block_size: int, *ids: int) -> TraceRequest:
    return TraceRequest(
        request_id, 0.0, 1, input_length=input_length, hash_ids=ids, hash_block_size=block_size
    )


def test_hash_prompts_hit_by_leading_ids_and_a_cut_last_block_counts() -> None:
    trie = PrefixTrie()
    assert trie.hit_tokens(hashed("a", 10, 4, 7, 8, 9)) == 0
    assert trie.hit_tokens(hashed("b", 10, 4, 7, 8, 9)) == 10  # 4 + 4 + the cut 2
    assert trie.hit_tokens(hashed("c", 12, 4, 7, 1, 9)) == 4  # stops at the first new id
    assert trie.hit_tokens(hashed("d", 8, 8, 7)) == 0  # other block size: other root


def test_later_turns_inherit_their_history_as_hits() -> None:
    requests = [
        tokens("a", *range(3, 23)),  # 20 tokens
        TraceRequest(
            "b", 0.0, 2, prompt_token_ids=(5, 6, 7), parent_request_id="a", session_id="s"
        ),
        TraceRequest("c", 0.0, 1, prompt_token_ids=(5,), parent_request_id="b", session_id="s"),
    ]
    stats = compute_stats(requests, token_block_size=4)
    # a: 20 (0 hits); b: history 20 + 1 output, + 3 own = 24; c: history 24 + 2, + 1 = 27
    assert stats.prompt_tokens == 20 + 24 + 27
    assert stats.prefix_hit_tokens == 21 + 26
    assert stats.input_length == LengthSummary(24.0, 26.4, 26.94, 27, 71 / 3)
    assert (stats.sessions, stats.later_turns) == (1, 2)


def test_empty_trace() -> None:
    stats = compute_stats([])
    assert (stats.requests, stats.time_span_s, stats.arrival_rate_per_s) == (0, 0.0, None)
    assert stats.prefix_hit_ratio == 0.0
    assert stats.input_length == LengthSummary(0.0, 0.0, 0.0, 0, 0.0)


@pytest.mark.parametrize("block_size", [1, 16])
def test_ratio_is_hits_over_prompt_tokens(block_size: int) -> None:
    stats = compute_stats(
        [tokens("a", *range(3, 35)), tokens("b", *range(3, 35))], token_block_size=block_size
    )
    assert (stats.prefix_hit_tokens, stats.prompt_tokens, stats.prefix_hit_ratio) == (32, 64, 0.5)
