"""The model: deterministic from its seed, every dtype runs, shapes are checked."""

from __future__ import annotations

import pytest
import torch

from schedcheck.gpu.backends.torch_ref import causal_attention
from schedcheck.gpu.model import LlamaModel, ModelConfig, make_model, random_weights


def _dense_forward(model: LlamaModel, ids: list[int]) -> torch.Tensor:
    tokens = torch.tensor(ids, dtype=torch.int64)
    positions = torch.arange(tokens.numel())

    def attend(layer, q, k, v):
        return causal_attention(q, k, v, model.cfg.softmax_scale, torch.float64)

    return model.logits(model.forward(tokens, positions, attend))


def test_same_seed_same_weights_and_logits(small_config: ModelConfig) -> None:
    a, b = random_weights(small_config, seed=7), random_weights(small_config, seed=7)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ids = [5, 9, 11, 3, 200]
    la = _dense_forward(LlamaModel(small_config, a), ids)
    lb = _dense_forward(LlamaModel(small_config, b), ids)
    assert torch.equal(la, lb)


def test_other_seed_other_weights(small_config: ModelConfig) -> None:
    a, b = random_weights(small_config, seed=1), random_weights(small_config, seed=2)
    assert not torch.equal(a["lm_head.weight"], b["lm_head.weight"])


def test_default_size_is_tiny_llama() -> None:
    cfg = ModelConfig()
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        2,
        128,
        4,
        2,
        32,
    )
    assert cfg.vocab_size == 32_000


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_every_dtype_runs_close_to_fp64(small_config: ModelConfig, dtype: torch.dtype) -> None:
    ids = [4, 8, 15, 16, 23, 42]
    ref = _dense_forward(make_model(small_config, seed=3, dtype=torch.float64), ids)
    out = _dense_forward(make_model(small_config, seed=3, dtype=dtype), ids)
    assert out.shape == (len(ids), small_config.vocab_size)
    tol = {torch.float64: 1e-12, torch.float32: 1e-4, torch.bfloat16: 0.5, torch.float16: 0.1}
    assert (out.double() - ref).abs().max().item() < tol[dtype]


def test_rope_depends_on_position_only(small_config: ModelConfig) -> None:
    """A token's layer-0 K at position p is the same whatever the batch around it."""
    model = make_model(small_config, seed=0, dtype=torch.float64)
    seen = {}

    def capture(name):
        def attend(layer, q, k, v):
            if layer == 0:
                seen[name] = k
            return causal_attention(q, k, v, small_config.softmax_scale, torch.float64)

        return attend

    model.forward(torch.tensor([7, 8, 9]), torch.tensor([0, 1, 2]), capture("all"))
    model.forward(torch.tensor([9]), torch.tensor([2]), capture("one"))
    assert torch.allclose(seen["all"][2], seen["one"][0], atol=1e-12, rtol=0)


def test_missing_weight_is_refused(small_config: ModelConfig) -> None:
    weights = random_weights(small_config, seed=0)
    del weights["lm_head.weight"]
    with pytest.raises(AssertionError, match="missing"):
        LlamaModel(small_config, weights)


def test_config_checks_heads() -> None:
    with pytest.raises(AssertionError):
        ModelConfig(num_heads=3, num_kv_heads=2)
