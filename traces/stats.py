"""Statistics of a trace (`schedcheck trace stats`), computed in one streaming pass.

- `requests`, `time_span_s` (last arrival - first), `arrival_rate_per_s` (requests /
  time_span_s; None when the span is 0);
- length percentiles p50/p90/p99 (numpy's default, linear interpolation), max and mean of
  `input_length` (the full prompt the engine sees: for a later turn, history + own prompt)
  and `output_length`; 0 for an empty trace;
- `prefix_hit_ratio`: token-weighted prefix hit ratio under an unbounded cache = hit tokens
  / prompt tokens over all requests, in file order. Own prompts hit through the block trie
  of `prefix.py`. A later turn's history (its parent's full prompt + the parent's output)
  counts as hit tokens (an unbounded cache still holds it), its own new text as misses.

Memory: the lengths (8 bytes per request), the full prompt length of every request (for
later turns), the set of session ids, and the trie: O(requests + distinct blocks).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from schedcheck.traces.prefix import DEFAULT_TOKEN_BLOCK_SIZE, PrefixTrie
from schedcheck.traces.schema import TraceRequest


@dataclass(frozen=True, slots=True)
class LengthSummary:
    p50: float
    p90: float
    p99: float
    max: int
    mean: float

    @staticmethod
    def of(lengths: array[int]) -> LengthSummary:
        """The summary of a length column (all 0 when it is empty)."""
        if not lengths:
            return LengthSummary(0.0, 0.0, 0.0, 0, 0.0)
        values = np.frombuffer(lengths, dtype=np.int64)
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return LengthSummary(
            float(p50), float(p90), float(p99), int(values.max()), float(values.mean())
        )


@dataclass(frozen=True, slots=True)
class TraceStats:
    requests: int
    time_span_s: float
    arrival_rate_per_s: float | None
    input_length: LengthSummary
    output_length: LengthSummary
    prompt_tokens: int
    prefix_hit_tokens: int
    prefix_hit_ratio: float
    token_block_size: int  # block granularity of token prompts in the hit ratio
    sessions: int
    later_turns: int  # requests with a parent_request_id
    aborts: int  # requests with an abort_time_s

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (nested dicts for the length summaries)."""
        return asdict(self)


def compute_stats(
    requests: Iterable[TraceRequest], *, token_block_size: int = DEFAULT_TOKEN_BLOCK_SIZE
) -> TraceStats:
    """The statistics of `requests`, in one pass (see the module docstring)."""
    accumulator = _Accumulator(token_block_size)
    for request in requests:
        accumulator.add(request)
    return accumulator.result()


class _Accumulator:
    """The running state of `compute_stats`."""

    def __init__(self, token_block_size: int) -> None:
        self.trie = PrefixTrie(token_block_size)
        self.contexts: dict[str, int] = {}  # request id -> full prompt + output length
        self.sessions: set[str] = set()  # counted, never iterated
        self.inputs: array[int] = array("q")
        self.outputs: array[int] = array("q")
        self.first_s = 0.0
        self.last_s = 0.0
        self.hit_tokens = 0
        self.later_turns = 0
        self.aborts = 0

    def add(self, request: TraceRequest) -> None:
        parent = request.parent_request_id
        if parent is None:
            history = 0
            self.hit_tokens += self.trie.hit_tokens(request)
        else:
            assert parent in self.contexts, "a parent comes first (the reader checks it)"
            history = self.contexts[parent]
            self.hit_tokens += history
            self.later_turns += 1
        full_length = history + request.num_own_prompt_tokens
        self.contexts[request.request_id] = full_length + request.output_length
        if not self.inputs:
            self.first_s = request.arrival_time_s
        self.last_s = request.arrival_time_s
        self.inputs.append(full_length)
        self.outputs.append(request.output_length)
        self.aborts += request.abort_time_s is not None
        if request.session_id is not None:
            self.sessions.add(request.session_id)

    def result(self) -> TraceStats:
        prompt_tokens = sum(self.inputs)
        assert 0 <= self.hit_tokens <= prompt_tokens
        span_s = self.last_s - self.first_s
        return TraceStats(
            requests=len(self.inputs),
            time_span_s=span_s,
            arrival_rate_per_s=len(self.inputs) / span_s if span_s > 0 else None,
            input_length=LengthSummary.of(self.inputs),
            output_length=LengthSummary.of(self.outputs),
            prompt_tokens=prompt_tokens,
            prefix_hit_tokens=self.hit_tokens,
            prefix_hit_ratio=self.hit_tokens / prompt_tokens if prompt_tokens else 0.0,
            token_block_size=self.trie.token_block_size,
            sessions=len(self.sessions),
            later_turns=self.later_turns,
            aborts=self.aborts,
        )
