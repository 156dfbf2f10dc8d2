"""CPU stand-ins for the GPU kernels, with the preconditions their interfaces assert.

Each computes attention by its own reading of its arguments (page table + seqused_k,
block_table + cu_seqlens_k, or contiguous varlen), so a replay through a real backend's
argument building runs on a CPU and is checked against the oracle. Used only by tests.
"""

from __future__ import annotations

import types

import torch

from schedcheck.gpu.backends.torch_ref import causal_attention

HALF = (torch.float16, torch.bfloat16)


def _int32_vector(t: torch.Tensor, n: int, name: str) -> None:
    assert t.dtype == torch.int32, f"{name} must be int32"
    assert t.shape == (n,), f"{name} must have shape ({n},)"
    assert t.stride(0) == 1, f"{name} must be contiguous"


def _varlen(q, keys_of, cu_q, scale):
    out = torch.empty_like(q)
    for i in range(cu_q.numel() - 1):
        lo, hi = int(cu_q[i]), int(cu_q[i + 1])
        k, v = keys_of(i)
        out[lo:hi] = causal_attention(q[lo:hi], k, v, scale, torch.float32)
    return out


def fa4_module(calls: list[dict]) -> types.ModuleType:
    """flash_attn.cute with flash_attn_varlen_func (FA4's keyword interface)."""

    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q=None,
        cu_seqlens_k=None,
        max_seqlen_q=None,
        max_seqlen_k=None,
        seqused_k=None,
        page_table=None,
        softmax_scale=None,
        causal=False,
        **rest,
    ):
        calls.append(dict(paged=page_table is not None, causal=causal, rest=rest))
        assert q.dtype in HALF and q.dtype == k.dtype == v.dtype, "inputs must be fp16/bf16"
        assert causal and not rest
        batch = cu_seqlens_q.numel() - 1
        _int32_vector(cu_seqlens_q, batch + 1, "cu_seqlens_q")
        if page_table is not None:
            assert cu_seqlens_k is None, "page_table is not supported with cu_seqlens_k"
            assert page_table.dtype == torch.int32 and page_table.stride(-1) == 1
            assert page_table.shape[0] == batch
            _int32_vector(seqused_k, batch, "seqused_k")
            assert int(seqused_k.max()) <= max_seqlen_k
            page = k.shape[1]

            def keys_of(i):
                n = int(seqused_k[i])
                pages = page_table[i, : -(-n // page)].long()
                return (
                    k[pages].reshape(-1, *k.shape[2:])[:n],
                    v[pages].reshape(-1, *v.shape[2:])[:n],
                )
        else:
            _int32_vector(cu_seqlens_k, batch + 1, "cu_seqlens_k")

            def keys_of(i):
                lo, hi = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
                return k[lo:hi], v[lo:hi]

        out = _varlen(q, keys_of, cu_seqlens_q, softmax_scale)
        return out, torch.zeros(q.shape[1], q.shape[0])

    module = types.ModuleType("flash_attn.cute")
    module.flash_attn_varlen_func = flash_attn_varlen_func
    return module


def fa2_module(calls: list[dict]) -> types.ModuleType:
    """flash_attn 2.x with flash_attn_varlen_func (paged only for block sizes % 256 == 0)."""

    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale=None,
        causal=False,
        block_table=None,
        **rest,
    ):
        calls.append(dict(paged=block_table is not None))
        assert q.dtype in HALF and causal and not rest
        batch = cu_seqlens_q.numel() - 1
        _int32_vector(cu_seqlens_q, batch + 1, "cu_seqlens_q")
        _int32_vector(cu_seqlens_k, batch + 1, "cu_seqlens_k")
        if block_table is not None:
            assert k.shape[1] % 256 == 0, "Paged KV cache block size must be divisible by 256"
            page = k.shape[1]

            def keys_of(i):
                n = int(cu_seqlens_k[i + 1] - cu_seqlens_k[i])
                pages = block_table[i, : -(-n // page)].long()
                return (
                    k[pages].reshape(-1, *k.shape[2:])[:n],
                    v[pages].reshape(-1, *v.shape[2:])[:n],
                )
        else:
            assert k.shape[0] == int(cu_seqlens_k[-1])

            def keys_of(i):
                lo, hi = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
                return k[lo:hi], v[lo:hi]

        return _varlen(q, keys_of, cu_seqlens_q, softmax_scale)

    module = types.ModuleType("flash_attn")
    module.__version__ = "2.7.4"
    module.flash_attn_varlen_func = flash_attn_varlen_func
    return module


def aten_flash(calls: list[dict]):
    """aten._flash_attention_forward's positional interface, on CPU."""

    def op(
        q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, *, scale=None
    ):
        calls.append(dict(max_q=max_q, max_k=max_k))
        assert q.dtype in HALF and dropout_p == 0.0 and is_causal and not return_debug_mask
        batch = cu_q.numel() - 1
        _int32_vector(cu_q, batch + 1, "cum_seq_q")
        _int32_vector(cu_k, batch + 1, "cum_seq_k")
        assert k.shape[0] == int(cu_k[-1]) and q.shape[1] % k.shape[1] == 0

        def keys_of(i):
            lo, hi = int(cu_k[i]), int(cu_k[i + 1])
            return k[lo:hi], v[lo:hi]

        return (_varlen(q, keys_of, cu_q, scale), None, None, None, None)

    return op
