"""torch-ref (and sdpa) through a shuffled block table equal a dense per-row reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from schedcheck.gpu.backends.sdpa import SdpaBackend
from schedcheck.gpu.backends.torch_ref import TorchRefBackend, causal_attention
from schedcheck.gpu.kv_cache import PagedKVCache

from .helpers import attn_batch, reference_row

BS, HK, H, D = 4, 2, 4, 8
# (query length, key length): a middle chunk, a decode, a whole prompt, a chunk ending a block
SHAPES = [(3, 7), (1, 5), (4, 4), (4, 8)]


def _setup(dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    cache = PagedKVCache(1, 32, BS, HK, D, dtype=dtype, initial_blocks=32)
    free = rng.permutation(32).tolist()
    tables, keys, values, queries = [], [], [], []
    for n, s in SHAPES:
        table = [free.pop() for _ in range(-(-s // BS))]
        k = torch.randn(s, HK, D, generator=gen, dtype=dtype)
        v = torch.randn(s, HK, D, generator=gen, dtype=dtype)
        slots = torch.tensor([table[j // BS] * BS + j % BS for j in range(s)])
        cache.write(0, k, v, slots)
        tables.append(table)
        keys.append(k)
        values.append(v)
        queries.append(torch.randn(n, H, D, generator=gen, dtype=dtype))
    batch = attn_batch(
        tables, [n for n, _ in SHAPES], [s for _, s in SHAPES], BS, 0.3, cache.zero_block_id
    )
    return cache, batch, torch.cat(queries), keys, values


def _reference(q_all, keys, values) -> torch.Tensor:
    rows, start = [], 0
    for (n, s), k, v in zip(SHAPES, keys, values, strict=True):
        for r in range(n):
            rows.append(reference_row(q_all[start + r], k, v, r + s - n + 1, 0.3))
        start += n
    return torch.stack(rows)


@pytest.mark.parametrize("backend", [TorchRefBackend(), SdpaBackend()], ids=["torch-ref", "sdpa"])
def test_paged_equals_dense_reference_fp64(backend) -> None:
    cache, batch, q, keys, values = _setup()
    out = backend.paged(q, cache.key_cache[0], cache.value_cache[0], batch)
    assert (out - _reference(q, keys, values)).abs().max().item() < 1e-12


def test_fp32_inputs_accumulate_in_fp32_and_fp64_on_request() -> None:
    cache, batch, q, keys, values = _setup(dtype=torch.float32)
    ref = _reference(q.double(), [k.double() for k in keys], [v.double() for v in values])
    for compute in (None, torch.float64):
        out = TorchRefBackend(compute).paged(q, cache.key_cache[0], cache.value_cache[0], batch)
        assert out.dtype == torch.float32
        assert (out.double() - ref).abs().max().item() < 1e-5


def test_bottom_right_alignment_and_empty_rows() -> None:
    """Query rows see keys j <= r + S - n; with S < n the first rows see nothing (zeros)."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(3, 2, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 1, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 1, 4, generator=gen, dtype=torch.float64)
    out = causal_attention(q, k, v, 0.5, torch.float64)
    assert torch.count_nonzero(out[0]) == 0  # row 0 sees j <= 0 + 2 - 3 = -1: nothing
    assert torch.allclose(out[1], v[0, 0].expand(2, 4))  # row 1 sees key 0 alone
    assert torch.allclose(out[2], reference_row(q[2], k, v, 2, 0.5))


def test_dense_matches_paged_for_one_request() -> None:
    cache, batch, q, keys, values = _setup()
    n = SHAPES[2][0]
    start = sum(m for m, _ in SHAPES[:2])
    dense = TorchRefBackend().dense(q[start : start + n], keys[2], values[2], 0.3)
    paged = TorchRefBackend().paged(q, cache.key_cache[0], cache.value_cache[0], batch)
    assert (dense - paged[start : start + n]).abs().max().item() < 1e-12
