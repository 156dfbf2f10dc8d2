"""torch-flash: torch's vendored FA2 kernels, `aten._flash_attention_forward`, varlen.

Needs nothing beyond torch on a CUDA machine. torch 2.11 has no block table in this op,
so K/V are gathered through the block table first (`key_slots`):

    _flash_attention_forward(q (T,H,D), k (sum S,Hk,D), v, cu_seqlens_q, cu_seqlens_k,
                             max_q, max_k, dropout_p=0, is_causal=True,
                             return_debug_mask=False, scale=...) -> (out, lse, ...)

is_causal is bottom-right aligned (the FA2 convention). GQA is native (H % Hk == 0).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from schedcheck.gpu.backends.base import AttentionBackend, AttnBatch, gather_keys


def _aten_op():
    """The aten op (a function so tests can stand in a CPU implementation)."""
    return torch.ops.aten._flash_attention_forward


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    scale: float,
) -> torch.Tensor:
    """One call of the aten op; cu_q / cu_k int32 (B+1,); returns out (T, H, D)."""
    assert cu_q.dtype == torch.int32 and cu_k.dtype == torch.int32
    assert q.shape[1] % k.shape[1] == 0 and k.shape == v.shape
    result = _aten_op()(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, True, False, scale=scale)
    return result[0]


class TorchFlashBackend(AttentionBackend):
    name: ClassVar[str] = "torch-flash"
    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    min_capability: ClassVar[tuple[int, int] | None] = (8, 0)
    head_dims_text: ClassVar[str] = "head_dim 8..256, a multiple of 8"
    block_sizes_text: ClassVar[str] = "any block size (K/V gathered)"

    def unavailable(self) -> str | None:
        if not hasattr(torch.ops.aten, "_flash_attention_forward"):
            return "this torch has no aten._flash_attention_forward"
        return None

    def head_dim_ok(self, head_dim: int, block_size: int) -> bool:
        return 8 <= head_dim <= 256 and head_dim % 8 == 0

    def paged(
        self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, batch: AttnBatch
    ) -> torch.Tensor:
        keys, values = gather_keys(key_cache, value_cache, batch)
        return flash_forward(
            q,
            keys,
            values,
            batch.query_start_loc,
            batch.cu_seqlens_k,
            batch.max_query_len,
            batch.max_seq_len,
            batch.softmax_scale,
        )

    def dense(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float
    ) -> torch.Tensor:
        cu = torch.tensor([0, q.shape[0]], dtype=torch.int32, device=q.device)
        return flash_forward(q, k, v, cu, cu, q.shape[0], k.shape[0], softmax_scale)
