"""sdpa: `scaled_dot_product_attention` per request, with a lower-right causal mask.

SDPA's own `is_causal` is top-left aligned (and refused for L != S by its flash path), so
each request gets `causal_lower_right(n, S)`:

    q_i (1, H, n, D), k_i / v_i (1, H, S, D) gathered through the block table, kv heads
    repeated to H; row r sees keys j <= r + S - n.

Any device and dtype SDPA takes (fp64 on CPU only); any block size.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch.nn.attention.bias import causal_lower_right
from torch.nn.functional import scaled_dot_product_attention

from schedcheck.gpu.backends.base import AttentionBackend, AttnBatch, BackendSpec, gather_keys


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q (n, H, D), k/v (S, Hk, D) -> (n, H, D), bottom-right causal."""
    n, s = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    qh = q.transpose(0, 1)[None]
    kh = k.repeat_interleave(group, dim=1).transpose(0, 1)[None]
    vh = v.repeat_interleave(group, dim=1).transpose(0, 1)[None]
    out = scaled_dot_product_attention(qh, kh, vh, attn_mask=causal_lower_right(n, s), scale=scale)
    return out[0].transpose(0, 1)


class SdpaBackend(AttentionBackend):
    name: ClassVar[str] = "sdpa"
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (
        torch.float64,
        torch.float32,
        torch.bfloat16,
        torch.float16,
    )

    def refusal(self, spec: BackendSpec) -> str | None:
        if spec.device_type == "cuda" and spec.dtype == torch.float64:
            return (
                f"backend {self.name!r} refuses: dtype fp64 on cuda; "
                f"it takes {self.takes()} (fp64 on cpu only)"
            )
        return super().refusal(spec)

    def paged(
        self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, batch: AttnBatch
    ) -> torch.Tensor:
        keys, values = gather_keys(key_cache, value_cache, batch)
        out = torch.empty_like(q)
        qsl, cu_k = batch.query_start_loc_np, batch.cu_seqlens_k_np
        for i in range(batch.num_reqs):
            lo, hi, klo, khi = int(qsl[i]), int(qsl[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
            out[lo:hi] = sdpa_causal(q[lo:hi], keys[klo:khi], values[klo:khi], batch.softmax_scale)
        return out

    def dense(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float
    ) -> torch.Tensor:
        return sdpa_causal(q, k, v, softmax_scale)
