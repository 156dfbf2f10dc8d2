"""A small Llama-architecture decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU.

The model does not know about caches: `forward` takes a callback that receives each
layer's q, k, v and returns the attention output, so the same weights run a paged step
(the executor) and a dense per-request forward (the baseline).

Shapes (T tokens, H heads, Hk kv heads, D head_dim)::

    input_ids (T,) ─► embed ─► [ RMSNorm ─► q (T,H,D) k,v (T,Hk,D) ─► RoPE(q,k)
                                 ─► attend(layer, q, k, v) ─► (T,H,D) ─► o_proj ─► + residual
                                 RMSNorm ─► SwiGLU ─► + residual ] x num_layers ─► RMSNorm
    hidden (T, hidden_size) ─► logits (T, vocab_size), the head in fp64

Weight names are Hugging Face Llama's (`model.layers.{i}.self_attn.q_proj.weight`, ...),
so `weights.py` reads and writes a safetensors directory the way HF lays it out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from schedcheck.gpu import layers
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE

AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, slots=True)
class ModelConfig:
    num_layers: int = 2
    hidden_size: int = 128
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 256
    vocab_size: int = DEFAULT_VOCAB_SIZE
    rope_theta: float = 10_000.0
    rms_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        assert self.num_layers >= 1 and self.hidden_size >= 1 and self.vocab_size >= 1
        assert self.num_heads % self.num_kv_heads == 0, "num_heads divisible by num_kv_heads"
        assert self.head_dim % 2 == 0, "RoPE needs an even head_dim"

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape (nn.Linear layout: (out_features, in_features))."""
    h, d = cfg.hidden_size, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (cfg.num_heads * d, h)
        shapes[p + "self_attn.k_proj.weight"] = (cfg.num_kv_heads * d, h)
        shapes[p + "self_attn.v_proj.weight"] = (cfg.num_kv_heads * d, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, cfg.num_heads * d)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (cfg.intermediate_size, h)
        shapes[p + "mlp.up_proj.weight"] = (cfg.intermediate_size, h)
        shapes[p + "mlp.down_proj.weight"] = (h, cfg.intermediate_size)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (cfg.vocab_size, h)
    return shapes


def random_weights(cfg: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """fp32 CPU weights drawn from one torch.Generator seeded with `seed`, in name order.

    Norm weights are 1 + N(0, 0.1); matrices N(0, 1/in_features), so activations stay O(1)
    and K/V of different positions differ by O(1); embeddings N(0, 1); the logit head
    N(0, 8/hidden) so logits spread over a few units and most top-2 margins are wide.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    weights = {}
    for name, shape in weight_shapes(cfg).items():
        draw = torch.randn(shape, generator=gen, dtype=torch.float32)
        if len(shape) == 1:
            weights[name] = 1.0 + 0.1 * draw
        elif name == "model.embed_tokens.weight":
            weights[name] = draw
        elif name == "lm_head.weight":
            weights[name] = draw * math.sqrt(8.0 / shape[1])
        else:
            weights[name] = draw / math.sqrt(shape[1])
    return weights


class LlamaModel:
    """Weights on one device in one dtype, and the forward pass over flattened tokens."""

    def __init__(
        self,
        cfg: ModelConfig,
        weights: dict[str, torch.Tensor],
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        expected = weight_shapes(cfg)
        missing = sorted(set(expected) - set(weights))
        assert not missing, f"weights missing: {missing[:3]}"
        for name, shape in expected.items():
            assert tuple(weights[name].shape) == shape, f"{name}: {weights[name].shape} != {shape}"
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.w = {k: weights[k].to(device=self.device, dtype=dtype) for k in expected}
        self.head64 = weights["lm_head.weight"].to(device=self.device, dtype=torch.float64)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attend: AttendFn
    ) -> torch.Tensor:
        """(T,) ids and positions -> (T, hidden) final-normed hidden states."""
        assert input_ids.shape == positions.shape and input_ids.ndim == 1
        cfg, w = self.cfg, self.w
        num_tokens = input_ids.shape[0]
        cos, sin = layers.rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, self.dtype)
        x = w["model.embed_tokens.weight"][input_ids]
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            h = layers.rms_norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(num_tokens, cfg.num_heads, -1)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(num_tokens, cfg.num_kv_heads, -1)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(num_tokens, cfg.num_kv_heads, -1)
            q, k = layers.apply_rope(q, cos, sin), layers.apply_rope(k, cos, sin)
            a = attend(i, q, k, v)
            assert a.shape == q.shape, f"attention output {tuple(a.shape)} != {tuple(q.shape)}"
            x = x + a.reshape(num_tokens, -1) @ w[p + "self_attn.o_proj.weight"].T
            h = layers.rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
            x = x + layers.swiglu(
                h,
                w[p + "mlp.gate_proj.weight"],
                w[p + "mlp.up_proj.weight"],
                w[p + "mlp.down_proj.weight"],
            )
        return layers.rms_norm(x, w["model.norm.weight"], cfg.rms_norm_eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, hidden) -> (N, vocab) logits, computed in fp64 from the hidden states.

        The head runs in fp64 from the given weights whatever the model dtype, so two runs'
        logits differ only by what their hidden states differ by (the trunk: attention,
        reduction order), never by the head's own rounding; tokens are their argmax."""
        return hidden.to(torch.float64) @ self.head64.T

    def set_weight(self, name: str, value: torch.Tensor) -> None:
        """Replace one weight (same shape), e.g. to craft a near tie in a test."""
        assert tuple(value.shape) == tuple(self.w[name].shape), f"{name}: shape differs"
        self.w[name] = value.to(device=self.device, dtype=self.dtype)
        if name == "lm_head.weight":
            self.head64 = value.to(device=self.device, dtype=torch.float64)


def make_model(
    cfg: ModelConfig | None = None,
    seed: int = 0,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> LlamaModel:
    """A model with random weights from `seed` (drawn on CPU, then moved)."""
    cfg = cfg or ModelConfig()
    return LlamaModel(cfg, random_weights(cfg, seed), device=device, dtype=dtype)
