"""The tiny dummy-weight model vLLM's whole engine runs, and its weights.

`write_model_dir` writes only a `config.json` (a tiny Llama) into a fresh temp dir: vLLM's
`load_format="dummy"` builds the model from it and never reads weights, and nothing is
fetched. vLLM's dummy loader draws every weight uniformly in about +-1e-3, which makes a
tiny model's logits about 1e-6 and every logprob -ln(vocab): useless for comparing outputs.
`redraw_dummy_weights` therefore wraps `DummyModelLoader.load_weights` so that, *inside*
the loader (after it, the CPU backend has pre-packed the linear weights), every weight
matrix is re-drawn from a seeded normal with std 1/sqrt(fan_in) and every 1-D weight (the
RMSNorm gains) set to 1. The shadow mode does not need it (its tokens are the harness's);
the kernel comparison does.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

HIDDEN_SIZE = 64
NUM_HEADS = 2  # head_dim 32: the smallest vLLM's CPU kernel takes (it refuses 16)
NUM_KV_HEADS = 1
NUM_LAYERS = 2
INTERMEDIATE_SIZE = 128
WEIGHT_SEED = 0
DEFAULT_VOCAB_SIZE = 32_000  # the simulator's default vocabulary (traces/tokens.py)


def tiny_llama_config(vocab_size: int, max_model_len: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "num_hidden_layers": NUM_LAYERS,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_model_len,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def write_model_dir(vocab_size: int, max_model_len: int) -> Path:
    """A fresh temp dir holding the tiny model's config.json (the caller may delete it)."""
    path = Path(tempfile.mkdtemp(prefix="schedcheck-vllm-model-"))
    config = tiny_llama_config(vocab_size, max_model_len)
    (path / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    return path


def redraw_dummy_weights(seed: int = WEIGHT_SEED) -> None:
    """Make vLLM's dummy loader draw seeded normal weights (idempotent, process-wide)."""
    import torch
    from vllm.model_executor.model_loader.dummy_loader import DummyModelLoader

    original = DummyModelLoader.load_weights
    if getattr(original, "schedcheck_redraw", False):
        return

    def load_weights(self: Any, model: Any, model_config: Any) -> None:
        original(self, model, model_config)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
                if param.dim() >= 2:
                    std = 1.0 / math.sqrt(param.shape[-1])
                    drawn = torch.randn(param.shape, generator=gen, dtype=torch.float32)
                    param.copy_((drawn * std).to(param.dtype))
                else:
                    param.fill_(1.0)

    load_weights.schedcheck_redraw = True  # type: ignore[attr-defined]
    DummyModelLoader.load_weights = load_weights
