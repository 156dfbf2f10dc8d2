"""The deployment a default run models, so "faster than real time" means something.

Default: Llama-3.1-8B in bf16 on one H100 80GB with vLLM's defaults for an API server.
KV cache capacity, as vLLM sizes it::

    kv_bytes_per_token = 2 (K and V) * 32 layers * 8 kv heads * 128 head dim * 2 bytes
                       = 131,072 bytes (128 KiB)
    kv_pool_bytes      = 80 GiB * 0.90 (gpu_memory_utilization)
                       - 15 GiB (weights) - 4 GiB (activations, CUDA graphs)   = 53 GiB
    num_gpu_blocks     = kv_pool_bytes // (kv_bytes_per_token * block_size)
                       = 27,136 blocks of 16 tokens (434,176 tokens)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import StepCostModel, profile

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Deployment:
    name: str
    kv_bytes_per_token: int
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    weights_bytes: int
    activation_bytes: int
    cost_profile: str
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int

    def num_gpu_blocks(self, block_size: int) -> int:
        pool_bytes = (
            int(self.gpu_memory_bytes * self.gpu_memory_utilization)
            - self.weights_bytes
            - self.activation_bytes
        )
        assert pool_bytes > 0
        return pool_bytes // (self.kv_bytes_per_token * block_size)

    def engine_config(self, block_size: int = 16, **overrides: Any) -> EngineConfig:
        """This deployment's config; overrides that are None keep the deployment's value."""
        base = EngineConfig(
            block_size=block_size,
            num_gpu_blocks=self.num_gpu_blocks(block_size),
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
        )
        return dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def cost_model(self) -> StepCostModel:
        return profile(self.cost_profile)


LLAMA3_8B_H100 = Deployment(
    name="llama3-8b-h100",
    kv_bytes_per_token=2 * 32 * 8 * 128 * 2,
    gpu_memory_bytes=80 * GIB,
    gpu_memory_utilization=0.90,
    weights_bytes=15 * GIB,
    activation_bytes=4 * GIB,
    cost_profile="llama3-8b-h100",
    max_num_batched_tokens=8192,
    max_num_seqs=256,
    max_model_len=131_072,
)

DEPLOYMENTS = {LLAMA3_8B_H100.name: LLAMA3_8B_H100}
