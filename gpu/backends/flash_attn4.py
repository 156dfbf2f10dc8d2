"""flash-attn-4: `flash_attn.cute.flash_attn_varlen_func`, paged through `page_table`.

The real paged kernel at block size 16 on Hopper (the preferred backend on an H200):

    q          (T, H, D)                      rows of every request, flattened
    k, v       (num_blocks, block_size, Hk, D) the cache itself, no gather
    cu_seqlens_q (B+1,) int32, seqused_k (B,) int32 = seq_lens, page_table (B, W) int32
    causal=True is bottom-right aligned; page_table with cu_seqlens_k is refused by FA4

Pages past seqused_k may hold anything; rows of a partly used last page must be finite:
the cache starts zeroed and is only written with model outputs. The dense call (the
baseline) is the same function without a page table (cu_seqlens over one request).
Each kernel configuration JIT-compiles once per process.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import torch

from schedcheck.gpu.backends.base import AttentionBackend, AttnBatch


def _import_fa4() -> Any:
    return importlib.import_module("flash_attn.cute")


class FlashAttn4Backend(AttentionBackend):
    name: ClassVar[str] = "flash-attn-4"
    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    min_capability: ClassVar[tuple[int, int] | None] = (9, 0)
    head_dims_text: ClassVar[str] = "head_dim 8..256, a multiple of 8 (of 16 with block size 16)"
    block_sizes_text: ClassVar[str] = "any block size"

    def unavailable(self) -> str | None:
        try:
            module = _import_fa4()
        except Exception as exc:  # ImportError, or a broken CUDA/cutlass install
            return (
                f"flash_attn.cute cannot be imported ({type(exc).__name__}: {exc}); "
                "install flash-attn-4 (gpu/fetch_wheels.sh, gpu/device_check.sh)"
            )
        if not hasattr(module, "flash_attn_varlen_func"):
            return "flash_attn.cute has no flash_attn_varlen_func"
        return None

    def head_dim_ok(self, head_dim: int, block_size: int) -> bool:
        multiple = 16 if block_size == 16 else 8
        return 8 <= head_dim <= 256 and head_dim % multiple == 0

    def paged(
        self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, batch: AttnBatch
    ) -> torch.Tensor:
        out = _import_fa4().flash_attn_varlen_func(
            q,
            key_cache,
            value_cache,
            cu_seqlens_q=batch.query_start_loc,
            max_seqlen_q=batch.max_query_len,
            max_seqlen_k=batch.max_seq_len,
            seqused_k=batch.seq_lens,
            page_table=batch.block_table,
            softmax_scale=batch.softmax_scale,
            causal=True,
        )
        return _first(out)

    def dense(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float
    ) -> torch.Tensor:
        cu = torch.tensor([0, q.shape[0]], dtype=torch.int32, device=q.device)
        cu_k = torch.tensor([0, k.shape[0]], dtype=torch.int32, device=q.device)
        out = _import_fa4().flash_attn_varlen_func(
            q,
            k,
            v,
            cu_seqlens_q=cu,
            cu_seqlens_k=cu_k,
            max_seqlen_q=q.shape[0],
            max_seqlen_k=k.shape[0],
            softmax_scale=softmax_scale,
            causal=True,
        )
        return _first(out)


def _first(out: Any) -> torch.Tensor:
    """FA4 returns (out, lse); older builds return out alone."""
    return out[0] if isinstance(out, tuple) else out
