"""The shadow KV as a vLLM attention backend: vLLM's own attention metadata, recorded.

Registered as vLLM's `CUSTOM` attention backend (`register_backend`, vLLM's plug-in point
for third-party backends). vLLM's model runner builds this backend's metadata from its
`CommonAttentionMetadata` (what its persistent batch, block table and `_prepare_inputs`
computed), once per KV-cache group per step; the forward of the group's first attention
layer records that metadata, so the harness checks the indices the kernel was handed::

    vLLM runner: InputBatch + BlockTable + _prepare_inputs -> CommonAttentionMetadata
                 -> ShadowMetadataBuilder.build() -> ShadowAttentionMetadata (numpy copies)
                 -> ShadowAttentionImpl.forward(layer 0)  -> RECORDER.steps[-1]

A kernel with this metadata writes row r's K/V at `slot_mapping[r]` and reads, for request
i, keys 0 .. seq_lens[i] - 1 through row i of `block_table` (slot of key k:
`block_table[i, k // block_size] * block_size + k % block_size`): `read_slots(i)`.

The forward computes no attention (its output is zeros): in the shadow mode the tokens come
from the harness's hash model, and vLLM's sampler is overridden with them
(`core.py`). Every kernel block size is declared supported (`MultipleOf(1)`), so vLLM runs
at the fuzzer's block sizes (1, 2, 4, 16, ...), which its CPU kernel (multiples of 32)
refuses. Imports vLLM and torch: load it only in an env that has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)

BACKEND_NAME = "CUSTOM"  # vLLM maps a backend to its enum member by this name
CLASS_PATH = "schedcheck.engines.vllm.engine.shadow_backend.ShadowAttentionBackend"


@dataclass
class ShadowAttentionMetadata:
    """One KV-cache group's attention metadata of one step, as vLLM's runner built it."""

    group: int  # the KV-cache group (vLLM's kv_cache_groups index)
    block_size: int  # the kernel block size of the group
    num_reqs: int
    num_actual_tokens: int  # rows without padding
    query_start_loc: np.ndarray  # (num_reqs + 1,) int64
    seq_lens: np.ndarray  # (num_reqs,) int64
    block_table: np.ndarray  # (num_reqs, width) int64, vLLM's padded table rows
    slot_mapping: np.ndarray  # (num_actual_tokens,) int64
    positions: np.ndarray | None  # (num_actual_tokens,) int64, when vLLM passes them
    ran: bool = field(default=False)  # a layer's forward ran with it

    def read_slots(self, i: int) -> np.ndarray:
        """The slots the kernel reads for request i: keys 0 .. seq_lens[i] - 1."""
        keys = np.arange(int(self.seq_lens[i]), dtype=np.int64)
        blocks = self.block_table[i, keys // self.block_size]
        return blocks * self.block_size + keys % self.block_size

    def written_slots(self) -> np.ndarray:
        """The slots the step's rows write their K/V to."""
        return self.slot_mapping


class ShadowRecorder:
    """What the forwards recorded since the last `take()`, per step."""

    def __init__(self) -> None:
        self.steps: list[ShadowAttentionMetadata] = []
        self.num_forwards = 0

    def take(self) -> list[ShadowAttentionMetadata]:
        out, self.steps = self.steps, []
        return out


RECORDER = ShadowRecorder()  # one per process: vLLM builds the backend by class path


def _np(t: torch.Tensor, n: int | None = None) -> np.ndarray:
    a = t.detach().to("cpu").numpy().astype(np.int64, copy=True)
    return a if n is None else a[:n]


class ShadowMetadataBuilder(AttentionMetadataBuilder[ShadowAttentionMetadata]):
    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: Any):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = int(kv_cache_spec.block_size)
        groups = vllm_config.cache_config  # the group index is found by the layer names
        del groups
        self.first_layer = layer_names[0] if layer_names else ""
        self.group = 0

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> ShadowAttentionMetadata:
        m = common_attn_metadata
        n = int(m.num_actual_tokens)
        num_reqs = int(m.num_reqs)
        return ShadowAttentionMetadata(
            group=self.group,
            block_size=self.block_size,
            num_reqs=num_reqs,
            num_actual_tokens=n,
            query_start_loc=_np(m.query_start_loc_cpu, num_reqs + 1),
            seq_lens=_np(m.seq_lens, num_reqs),
            block_table=_np(m.block_table_tensor, num_reqs),
            slot_mapping=_np(m.slot_mapping, n),
            positions=None if m.positions is None else _np(m.positions, n),
        )


class ShadowAttentionImpl(AttentionImpl[ShadowAttentionMetadata]):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        **_: Any,
    ) -> None:
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = sliding_window
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def forward(
        self,
        layer: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: ShadowAttentionMetadata | None,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        output.zero_()
        if attn_metadata is None:  # profiling / warm-up: no metadata
            return output
        RECORDER.num_forwards += 1
        if not attn_metadata.ran:  # the group's first layer this step
            attn_metadata.ran = True
            RECORDER.steps.append(attn_metadata)
        return output


class ShadowAttentionBackend(AttentionBackend):
    """Every kernel block size, every head size, fp32/fp16/bf16; KV written by nobody."""

    forward_includes_kv_cache_update: bool = True  # forward owns the (absent) KV write
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[Any]] = ["auto", "float32", "float16", "bfloat16"]

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[int | MultipleOf]:
        return [MultipleOf(1)]

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type[ShadowAttentionImpl]:
        return ShadowAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[ShadowMetadataBuilder]:
        return ShadowMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_size: int,
        cache_dtype_str: str = "auto",
    ) -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER
