"""torch-ref: the oracle. Gathers each request's K/V through its block table and runs
masked softmax attention in fp32 (fp64 for fp64, or when asked), on CPU or GPU.

Request i of a step (query length n = qsl[i+1] - qsl[i], key length S = seq_lens[i])::

    scores (H, n, S) = q_i @ k_i^T * scale        k_i = K[key_slots of request i]
    row r keeps key j iff j <= r + S - n          (bottom-right causal)
    out_i = softmax(scores) @ v_i                 rows with no key left give 0

The loop over requests is bounded by the batch size; each request is one small matmul.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from schedcheck.gpu.backends.base import AttentionBackend, AttnBatch, gather_keys
from schedcheck.gpu.dtypes import accumulate_dtype

SCORES_PER_CHUNK = 1 << 24  # elements of one score matrix (H, rows, S): 64 MiB in fp32


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float,
    compute_dtype: torch.dtype,
) -> torch.Tensor:
    """q (n, H, D), k/v (S, Hk, D) -> (n, H, D), bottom-right causal, in compute_dtype."""
    n, num_heads, _ = q.shape
    s = k.shape[0]
    group = num_heads // k.shape[1]
    kc = k.to(compute_dtype).repeat_interleave(group, dim=1).transpose(0, 1)  # (H, S, D)
    vc = v.to(compute_dtype).repeat_interleave(group, dim=1).transpose(0, 1)
    keys = torch.arange(s, device=q.device)[None, :]
    out = torch.empty_like(q)
    rows_per_chunk = max(1, SCORES_PER_CHUNK // (num_heads * max(s, 1)))
    for lo in range(0, n, rows_per_chunk):
        hi = min(n, lo + rows_per_chunk)
        qc = q[lo:hi].to(compute_dtype).transpose(0, 1)  # (H, rows, D)
        scores = (qc @ kc.transpose(1, 2)) * softmax_scale  # (H, rows, S)
        rows = torch.arange(lo, hi, device=q.device)[:, None]
        visible = keys <= rows + (s - n)  # (rows, S)
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with no key: all zero
        out[lo:hi] = (probs @ vc).transpose(0, 1).to(q.dtype)
    return out


class TorchRefBackend(AttentionBackend):
    name: ClassVar[str] = "torch-ref"
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (
        torch.float64,
        torch.float32,
        torch.bfloat16,
        torch.float16,
    )

    def __init__(self, compute_dtype: torch.dtype | None = None):
        assert compute_dtype in (None, torch.float32, torch.float64)
        self.compute_dtype = compute_dtype

    def _compute(self, dtype: torch.dtype) -> torch.dtype:
        return self.compute_dtype or accumulate_dtype(dtype)

    def paged(
        self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, batch: AttnBatch
    ) -> torch.Tensor:
        keys, values = gather_keys(key_cache, value_cache, batch)
        out = torch.empty_like(q)
        qsl, cu_k = batch.query_start_loc_np, batch.cu_seqlens_k_np
        for i in range(batch.num_reqs):
            lo, hi = int(qsl[i]), int(qsl[i + 1])
            klo, khi = int(cu_k[i]), int(cu_k[i + 1])
            out[lo:hi] = causal_attention(
                q[lo:hi],
                keys[klo:khi],
                values[klo:khi],
                batch.softmax_scale,
                self._compute(q.dtype),
            )
        return out

    def dense(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float
    ) -> torch.Tensor:
        return causal_attention(q, k, v, softmax_scale, self._compute(q.dtype))
