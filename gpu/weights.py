"""Weights from (and to) a local safetensors directory laid out the Hugging Face way.

    DIR/
      config.json                 {"num_hidden_layers", "hidden_size", "num_attention_heads",
                                   "num_key_value_heads", "head_dim", "intermediate_size",
                                   "vocab_size", "rope_theta", "rms_norm_eps", ...}
      model.safetensors           or model-00001-of-0000N.safetensors ... (every *.safetensors
                                   file is read, in name order; a name twice is an error)

Nothing is fetched from a hub: the directory must exist locally. A config without
`head_dim` gets hidden_size / num_attention_heads (HF's default); `tie_word_embeddings`
reuses the embedding as the logit head.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from schedcheck.gpu.model import LlamaModel, ModelConfig

_HF_KEYS = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "rope_theta": "rope_theta",
    "rms_norm_eps": "rms_norm_eps",
}


def config_from_hf(obj: dict[str, Any]) -> ModelConfig:
    values = {ours: obj[theirs] for ours, theirs in _HF_KEYS.items() if theirs in obj}
    default_kv_heads = ModelConfig().num_kv_heads
    values.setdefault("num_kv_heads", values.get("num_heads", default_kv_heads))
    if "head_dim" not in values and "hidden_size" in values and "num_heads" in values:
        values["head_dim"] = values["hidden_size"] // values["num_heads"]
    return ModelConfig(**values)


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    obj = {theirs: getattr(cfg, ours) for ours, theirs in _HF_KEYS.items()}
    obj.update(architectures=["LlamaForCausalLM"], model_type="llama", tie_word_embeddings=False)
    return obj


def load_weights(directory: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Read config.json and every *.safetensors file of `directory` (on CPU)."""
    from safetensors.torch import load_file

    root = Path(directory)
    if not (root / "config.json").is_file():
        raise ValueError(f"{root}: no config.json (a local safetensors model directory)")
    hf = json.loads((root / "config.json").read_text(encoding="utf-8"))
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{root}: no *.safetensors files")
    weights: dict[str, torch.Tensor] = {}
    for path in files:
        shard = load_file(str(path), device="cpu")
        twice = sorted(set(shard) & set(weights))
        if twice:
            raise ValueError(f"{path}: tensor {twice[0]!r} also in an earlier shard")
        weights.update(shard)
    if hf.get("tie_word_embeddings") and "lm_head.weight" not in weights:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    return config_from_hf(hf), weights


def save_weights(
    directory: str | Path,
    cfg: ModelConfig,
    weights: dict[str, torch.Tensor],
    max_shard_tensors: int = 0,
) -> Path:
    """Write config.json + safetensors; `max_shard_tensors` > 0 splits into shards."""
    from safetensors.torch import save_file

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(
        json.dumps(config_to_hf(cfg), indent=1) + "\n", encoding="utf-8"
    )
    names = sorted(weights)
    size = max_shard_tensors if max_shard_tensors > 0 else len(names)
    shards = [names[i : i + size] for i in range(0, len(names), size)]
    for index, shard in enumerate(shards, start=1):
        name = (
            f"model-{index:05d}-of-{len(shards):05d}.safetensors"
            if len(shards) > 1
            else "model.safetensors"
        )
        save_file({k: weights[k].contiguous() for k in shard}, str(root / name))
    return root


def load_model(
    directory: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> LlamaModel:
    cfg, weights = load_weights(directory)
    return LlamaModel(cfg, weights, device=device, dtype=dtype)
