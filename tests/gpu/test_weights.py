"""Safetensors directory round trip with weights the test writes itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from schedcheck.gpu.model import LlamaModel, ModelConfig, random_weights
from schedcheck.gpu.weights import config_from_hf, load_model, load_weights, save_weights

pytest.importorskip("safetensors")


@pytest.mark.parametrize("shard", [0, 5])
def test_round_trip_is_bitwise(tmp_path: Path, small_config: ModelConfig, shard: int) -> None:
    weights = random_weights(small_config, seed=11)
    save_weights(tmp_path, small_config, weights, max_shard_tensors=shard)
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert (len(files) > 1) == (shard > 0)
    cfg, loaded = load_weights(tmp_path)
    assert cfg == small_config
    assert loaded.keys() == weights.keys()
    assert all(torch.equal(loaded[k], weights[k]) for k in weights)
    model = load_model(tmp_path, dtype=torch.float32)
    assert isinstance(model, LlamaModel) and model.cfg == small_config


def test_tied_embeddings_and_default_head_dim(tmp_path: Path) -> None:
    cfg = ModelConfig(
        vocab_size=64,
        hidden_size=64,
        num_heads=4,
        num_kv_heads=4,
        head_dim=16,
        intermediate_size=96,
        num_layers=1,
    )
    weights = random_weights(cfg, seed=0)
    del weights["lm_head.weight"]
    save_weights(tmp_path, cfg, weights)
    hf = json.loads((tmp_path / "config.json").read_text())
    del hf["head_dim"], hf["num_key_value_heads"]
    hf["tie_word_embeddings"] = True
    (tmp_path / "config.json").write_text(json.dumps(hf))
    loaded_cfg, loaded = load_weights(tmp_path)
    assert loaded_cfg.head_dim == 16 and loaded_cfg.num_kv_heads == 4
    assert torch.equal(loaded["lm_head.weight"], loaded["model.embed_tokens.weight"])


def test_missing_directory_pieces_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no config\.json"):
        load_weights(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"no \*\.safetensors"):
        load_weights(tmp_path)


def test_hf_names_map_to_ours() -> None:
    cfg = config_from_hf(
        {
            "num_hidden_layers": 3,
            "hidden_size": 96,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "vocab_size": 100,
        }
    )
    assert (cfg.num_layers, cfg.head_dim, cfg.num_kv_heads) == (3, 16, 2)
