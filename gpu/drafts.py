"""Scheduled draft tokens in one step (speculative decoding with acceptance), numpy only.

A request with K drafts d1..dK scheduled after its last known token t (position n-1) runs
its last 1 + K rows, and every one of them samples (`RunnerMetadata.spec_rows`). In a
teacher-forced replay the true sequence x is known, so acceptance follows from the
chunk alone::

    rows of the request     r0     r1     r2     r3          K = 3, n = num_tokens
    position                n-1    n      n+1    n+2
    input_ids               t      d1     d2     d3
    true token              t      x_n    x_n+1  x_n+2       d1 == x_n, d2 != x_n+1
    draft row               no     yes    yes    yes         the last K rows
    accepted                -      yes    no     no
    rejected row            no     no     yes    yes         from the first non-accepted on
    sample judged           s0     s1     -      -           s1: the bonus (x_n+1)

A draft row is accepted iff its input is the true token at its position and every earlier
draft row of its request is accepted; a draft row at or past the end of the true sequence
is never accepted. A rejected row's KV is the draft's, not the true one (the owner
rewrites that slot before it reads it again), and its sample is discarded. Live (not
teacher-forced), the sampler accepts the longest prefix of drafts equal to the samples of
the rows before them (`num_accepted`) and the sample after them is the bonus.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from schedcheck.engines.metadata import RunnerMetadata

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def draft_rows(md: RunnerMetadata) -> BoolArray:
    """(T,) True for each request's last num_draft_tokens[i] rows (at most its rows)."""
    out = np.zeros(md.num_tokens, dtype=bool)
    if md.num_draft_tokens.size == 0:
        return out
    ends = md.query_start_loc[1:]
    counts = np.minimum(md.num_draft_tokens, md.query_lens)
    for i in np.flatnonzero(counts).tolist():  # bounded by the batch size
        out[ends[i] - counts[i] : ends[i]] = True
    return out


def rejected_rows(md: RunnerMetadata, tokens: Mapping[str, IntArray]) -> BoolArray:
    """(T,) True for every draft row from each request's first non-accepted draft on,
    judged against `tokens` (request id -> true sequence; a request not in it has no
    true token, so all its draft rows are rejected)."""
    drafts = draft_rows(md)
    out = np.zeros(md.num_tokens, dtype=bool)
    if not drafts.any():
        return out
    for i in np.flatnonzero(md.num_draft_tokens).tolist():  # bounded by the batch size
        lo, hi = int(md.query_start_loc[i]), int(md.query_start_loc[i + 1])
        rows = lo + np.flatnonzero(drafts[lo:hi])
        true = tokens.get(md.req_ids[i], np.zeros(0, dtype=np.int64))
        positions = md.positions[rows]
        inside = positions < true.size
        equal = np.zeros(rows.size, dtype=bool)
        equal[inside] = md.input_ids[rows[inside]] == true[positions[inside]]
        out[rows] = ~np.logical_and.accumulate(equal)
    return out


def sample_rows(md: RunnerMetadata) -> IntArray:
    """(S,) the rows whose logits are computed, ascending: every `logits_indices` row, and
    every spec row (the last 1 + K rows) of a request with drafts."""
    rows = np.union1d(md.logits_indices, md.spec_rows)
    return rows.astype(np.int64, copy=False)


def num_accepted(drafts: IntArray, samples: IntArray) -> int:
    """The rejection sampler (greedy): the length of the longest prefix of `drafts` (K,)
    equal to `samples` (K + 1,: the samples of the rows before each draft, then the
    bonus row's); samples[num_accepted] is the bonus token."""
    assert samples.size == drafts.size + 1
    mismatch = np.flatnonzero(drafts != samples[: drafts.size])
    return int(mismatch[0]) if mismatch.size else int(drafts.size)
