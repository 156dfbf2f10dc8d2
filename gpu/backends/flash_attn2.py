"""flash-attn (2.x): `flash_attn.flash_attn_varlen_func`, when importable.

Its paged `block_table` requires a block size divisible by 256 (flash_api.cpp checks it);
with any other block size the K/V of each request are gathered through the block table
into one contiguous varlen batch first:

    block size % 256 == 0:  k, v = cache (num_blocks, bs, Hk, D); block_table (B, W) int32;
                            cu_seqlens_k = cumsum(seq_lens)
    otherwise:              k, v = cache[key_slots] (sum seq_lens, Hk, D); cu_seqlens_k

causal=True is bottom-right aligned in flash-attn >= 2.1.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import torch

from schedcheck.gpu.backends.base import AttentionBackend, AttnBatch, gather_keys

PAGED_BLOCK_MULTIPLE = 256


def _import_fa2() -> Any:
    return importlib.import_module("flash_attn")


class FlashAttn2Backend(AttentionBackend):
    name: ClassVar[str] = "flash-attn"
    devices: ClassVar[tuple[str, ...]] = ("cuda",)
    min_capability: ClassVar[tuple[int, int] | None] = (8, 0)
    head_dims_text: ClassVar[str] = "head_dim 8..256, a multiple of 8"
    block_sizes_text: ClassVar[str] = (
        "any block size (paged only when divisible by 256, else gathered)"
    )

    def unavailable(self) -> str | None:
        try:
            module = _import_fa2()
        except Exception as exc:
            return f"flash_attn cannot be imported ({type(exc).__name__}: {exc})"
        version = str(getattr(module, "__version__", ""))
        if not version.startswith("2.") or not hasattr(module, "flash_attn_varlen_func"):
            return f"flash_attn {version or '(no version)'} is not flash-attn 2.x"
        return None

    def head_dim_ok(self, head_dim: int, block_size: int) -> bool:
        return 8 <= head_dim <= 256 and head_dim % 8 == 0

    def paged(
        self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, batch: AttnBatch
    ) -> torch.Tensor:
        fn = _import_fa2().flash_attn_varlen_func
        common = dict(
            cu_seqlens_q=batch.query_start_loc,
            cu_seqlens_k=batch.cu_seqlens_k,
            max_seqlen_q=batch.max_query_len,
            max_seqlen_k=batch.max_seq_len,
            softmax_scale=batch.softmax_scale,
            causal=True,
        )
        if batch.block_size % PAGED_BLOCK_MULTIPLE == 0:
            return fn(q, key_cache, value_cache, block_table=batch.block_table, **common)
        keys, values = gather_keys(key_cache, value_cache, batch)
        return fn(q, keys, values, **common)

    def dense(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float
    ) -> torch.Tensor:
        cu = torch.tensor([0, q.shape[0]], dtype=torch.int32, device=q.device)
        return _import_fa2().flash_attn_varlen_func(
            q,
            k,
            v,
            cu_seqlens_q=cu,
            cu_seqlens_k=cu,
            max_seqlen_q=q.shape[0],
            max_seqlen_k=k.shape[0],
            softmax_scale=softmax_scale,
            causal=True,
        )
