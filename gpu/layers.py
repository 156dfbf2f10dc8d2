"""The position-wise pieces of a Llama decoder: RMSNorm, rotary embedding, SwiGLU.

Each works row by row (row = one token), so a token's result does not depend on which
other tokens share its batch: chunked and unchunked runs differ only in attention and in
the reduction order of matrix products.
"""

from __future__ import annotations

import torch

from schedcheck.gpu.dtypes import accumulate_dtype


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * weight / sqrt(mean(x^2) + eps), reduced in fp32 (fp64 for fp64), cast back."""
    acc = x.to(accumulate_dtype(x.dtype))
    normed = acc * torch.rsqrt(acc.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, head_dim) cos and sin of angle positions[t] * theta^(-2i/head_dim).

    Angles are computed in fp64 from the integer positions, so position p gets the same
    cos/sin in every batch it appears in.
    """
    assert head_dim % 2 == 0, "rotary embedding needs an even head_dim"
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device)
    inv_freq = 1.0 / (theta ** (exponent / head_dim))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (T, heads, head_dim) by the half-split convention (HF Llama's rotate_half).

    x = [x1 | x2]  ->  [x1*cos - x2*sin | x2*cos + x1*sin]
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def swiglu(
    x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, down_w: torch.Tensor
) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)); weights in nn.Linear layout (out, in)."""
    hidden = torch.nn.functional.silu(x @ gate_w.T) * (x @ up_w.T)
    return hidden @ down_w.T
