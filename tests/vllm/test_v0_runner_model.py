"""The model of vLLM v0's runner arithmetic (engines/vllm/v0/runner.py), without vLLM.

The vllm-v0.* tox envs also check it against the real runner methods (test_vllm_v0.py).
"""

from __future__ import annotations

import pytest

from schedcheck.engines.vllm.v0.runner import (
    V054_CHUNKED_HIT_ERROR,
    RunnerInputError,
    runner_seq_inputs,
)

# the runner of each release, as engines/vllm/v0/eras.py tells them apart
HITS_INSIDE_CHUNKS = {"0.5.4": False, "0.6.0": True}


def _view(version, *, prompt=True, computed=0, length=20, chunk=8, blocks=0, chunked=True):
    return runner_seq_inputs(
        hits_inside_chunks=HITS_INSIDE_CHUNKS[version],
        is_prompt=prompt,
        num_computed_tokens=computed,
        seq_data_len=length,
        token_chunk_size=chunk,
        num_computed_blocks=blocks,
        block_size=4,
        chunked_prefill_enabled=chunked,
    )


@pytest.mark.parametrize("version", ["0.5.4", "0.6.0"])
def test_no_hit_and_decode(version):
    v = _view(version, computed=8, chunk=8)
    assert (v.context_len, v.seq_len, v.prefix_cache_hit, v.hit_moved_context) == (
        8,
        16,
        False,
        False,
    )
    d = _view(version, prompt=False, computed=19, length=21, chunk=1, blocks=3)
    assert (d.context_len, d.query_len, d.prefix_cache_hit) == (20, 1, False)


def test_v060_hit_inside_behind_and_covering_the_chunk():
    assert _view("0.6.0", computed=0, chunk=8, blocks=1).context_len == 4  # inside
    assert _view("0.6.0", computed=8, chunk=8, blocks=1).context_len == 8  # behind
    covering = _view("0.6.0", computed=0, chunk=8, blocks=4)  # 16 cached >= seq_len 8
    assert (covering.context_len, covering.query_len, covering.hit_moved_context) == (7, 1, True)


def test_v054_hit():
    v = _view("0.5.4", computed=0, chunk=20, blocks=2, chunked=False)
    assert (v.context_len, v.seq_len, v.hit_moved_context) == (8, 20, True)
    with pytest.raises(RuntimeError, match=V054_CHUNKED_HIT_ERROR):
        _view("0.5.4", computed=8, chunk=8, blocks=2, chunked=True)
    with pytest.raises(RunnerInputError, match="chunk starting at 8"):
        _view("0.5.4", computed=8, chunk=12, blocks=1, chunked=False)
    with pytest.raises(RunnerInputError, match="empty query"):
        _view("0.5.4", computed=0, length=8, chunk=8, blocks=2, chunked=False)
