"""Small builders shared by the gpu tests."""

from __future__ import annotations

import numpy as np
import torch

from schedcheck.gpu.backends.base import AttnBatch


def attn_batch(
    tables: list[list[int]],
    query_lens: list[int],
    seq_lens: list[int],
    block_size: int,
    scale: float,
    zero_block_id: int,
) -> AttnBatch:
    width = max(len(t) for t in tables)
    table = np.full((len(tables), width), zero_block_id, dtype=np.int32)
    for i, t in enumerate(tables):
        table[i, : len(t)] = t
    qsl = np.zeros(len(query_lens) + 1, dtype=np.int32)
    np.cumsum(query_lens, out=qsl[1:])
    sl = np.asarray(seq_lens, dtype=np.int32)
    return AttnBatch(
        torch.as_tensor(qsl),
        torch.as_tensor(sl),
        torch.as_tensor(table),
        table,
        sl,
        qsl,
        block_size,
        scale,
    )


def reference_row(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: int, scale: float
) -> torch.Tensor:
    """One query row (H, D) against the first `visible` keys (S, Hk, D), head by head."""
    num_heads, group = q.shape[0], q.shape[0] // keys.shape[1]
    out = torch.zeros_like(q)
    if visible <= 0:
        return out
    for h in range(num_heads):
        k, v = keys[:visible, h // group], values[:visible, h // group]
        w = torch.softmax((k @ q[h]) * scale, dim=0)
        out[h] = w @ v
    return out
