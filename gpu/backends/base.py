"""The one interface every attention backend implements, and what a step hands it.

A backend declares what it takes (devices, dtypes, head dims, block sizes, the CUDA
compute capability) and refuses anything else with a message that says what it got and
what it takes. It runs two calls:

- `paged(q, key_cache, value_cache, batch)`: one varlen forward over every chunk and decode
  of a step, keys read through the block table (or gathered through it);
- `dense(q, k, v)`: one request alone, causal, no cache (the baseline).

Both are causal, bottom-right aligned: query row r of a request with query length n and
key length S sees keys j <= r + S - n (its last row sees every key).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from schedcheck.gpu.dtypes import dtype_name


class BackendRefused(ValueError):
    """The backend cannot run this configuration, or is not installed here."""


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """What a backend is asked to run."""

    device_type: str  # "cpu" or "cuda"
    dtype: torch.dtype
    block_size: int
    head_dim: int
    num_heads: int
    num_kv_heads: int
    capability: tuple[int, int] | None = None  # CUDA compute capability, None on CPU

    @staticmethod
    def for_device(device: torch.device | str, **fields) -> BackendSpec:
        device = torch.device(device)
        cap = None
        if device.type == "cuda" and torch.cuda.is_available():
            cap = torch.cuda.get_device_capability(device)
        return BackendSpec(device_type=device.type, capability=cap, **fields)


@dataclass(frozen=True)
class AttnBatch:
    """One step's attention metadata as tensors on the model's device.

    query_start_loc (B+1,) int32   rows of request i: [qsl[i], qsl[i+1])
    seq_lens        (B,)   int32   key length of request i (a count)
    block_table     (B, W) int32   logical block -> block id; invalid and padding
                                   entries hold the cache's zero block id
    key_slots       (sum seq_lens,) int64  slot of key j of request i, requests
                                   concatenated (cu_seqlens_k marks the starts)
    """

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    block_table_np: np.ndarray  # the same, on the host
    seq_lens_np: np.ndarray
    query_start_loc_np: np.ndarray
    block_size: int
    softmax_scale: float

    @staticmethod
    def from_host(
        query_start_loc: np.ndarray,
        seq_lens: np.ndarray,
        block_table: np.ndarray,
        block_size: int,
        softmax_scale: float,
        to_device: Callable[[np.ndarray], torch.Tensor],
    ) -> AttnBatch:
        """The batch of these host arrays (int32), each also moved by `to_device`."""
        return AttnBatch(
            query_start_loc=to_device(query_start_loc),
            seq_lens=to_device(seq_lens),
            block_table=to_device(block_table),
            block_table_np=block_table,
            seq_lens_np=seq_lens,
            query_start_loc_np=query_start_loc,
            block_size=block_size,
            softmax_scale=softmax_scale,
        )

    @property
    def num_reqs(self) -> int:
        return int(self.seq_lens_np.size)

    @property
    def max_query_len(self) -> int:
        return int(np.diff(self.query_start_loc_np).max())

    @property
    def max_seq_len(self) -> int:
        return int(self.seq_lens_np.max())

    @functools.cached_property
    def cu_seqlens_k_np(self) -> np.ndarray:
        cu = np.zeros(self.num_reqs + 1, dtype=np.int64)
        np.cumsum(self.seq_lens_np, out=cu[1:])
        return cu

    @functools.cached_property
    def cu_seqlens_k(self) -> torch.Tensor:
        return torch.as_tensor(self.cu_seqlens_k_np, dtype=torch.int32).to(self.seq_lens.device)

    @functools.cached_property
    def key_slots_np(self) -> np.ndarray:
        bs = self.block_size
        key_req = np.repeat(np.arange(self.num_reqs), self.seq_lens_np)
        j = np.arange(key_req.size, dtype=np.int64) - self.cu_seqlens_k_np[key_req]
        return self.block_table_np[key_req, j // bs].astype(np.int64) * bs + j % bs

    @functools.cached_property
    def key_slots(self) -> torch.Tensor:
        return torch.as_tensor(self.key_slots_np).to(self.seq_lens.device)


def gather_keys(
    key_cache: torch.Tensor, value_cache: torch.Tensor, batch: AttnBatch
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of every request's keys, concatenated: (sum seq_lens, Hk, D) each."""
    tail = key_cache.shape[2:]
    keys = key_cache.view(-1, *tail).index_select(0, batch.key_slots)
    values = value_cache.view(-1, *tail).index_select(0, batch.key_slots)
    return keys, values


class AttentionBackend:
    """Base: declared capabilities, refusal, and the two calls (subclasses implement)."""

    name: ClassVar[str] = "?"
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float16, torch.bfloat16)
    min_capability: ClassVar[tuple[int, int] | None] = None
    head_dims_text: ClassVar[str] = "any even head_dim"
    block_sizes_text: ClassVar[str] = "any block size"

    def unavailable(self) -> str | None:
        """Why this backend cannot be imported here, or None."""
        return None

    def head_dim_ok(self, head_dim: int, block_size: int) -> bool:
        return head_dim % 2 == 0

    def block_size_ok(self, block_size: int) -> bool:
        return block_size >= 1

    def takes(self) -> str:
        dtypes = ", ".join(dtype_name(d) for d in self.dtypes)
        cap = ""
        if self.min_capability is not None:
            major, minor = self.min_capability
            cap = f" (compute capability >= {major}.{minor})"
        return (
            f"devices {', '.join(self.devices)}{cap}; dtypes {dtypes}; "
            f"{self.head_dims_text}; {self.block_sizes_text}"
        )

    def refusal(self, spec: BackendSpec) -> str | None:
        """Why this backend refuses `spec`, or None if it takes it."""
        reason = self.unavailable() or _first_reason(self, spec)
        if reason is None:
            return None
        return f"backend {self.name!r} refuses: {reason}; it takes {self.takes()}"

    def check(self, spec: BackendSpec) -> None:
        reason = self.refusal(spec)
        if reason is not None:
            raise BackendRefused(reason)

    def paged(
        self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, batch: AttnBatch
    ) -> torch.Tensor:
        raise NotImplementedError

    def dense(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float
    ) -> torch.Tensor:
        raise NotImplementedError


def _first_reason(backend: AttentionBackend, spec: BackendSpec) -> str | None:
    if spec.device_type not in backend.devices:
        return f"device {spec.device_type}"
    if backend.min_capability is not None and (
        spec.capability is None or spec.capability < backend.min_capability
    ):
        return f"compute capability {spec.capability}"
    if spec.dtype not in backend.dtypes:
        return f"dtype {dtype_name(spec.dtype)}"
    if spec.num_heads % spec.num_kv_heads:
        return f"{spec.num_heads} heads over {spec.num_kv_heads} kv heads"
    if not backend.block_size_ok(spec.block_size):
        return f"block size {spec.block_size}"
    if not backend.head_dim_ok(spec.head_dim, spec.block_size):
        return f"head_dim {spec.head_dim} with block size {spec.block_size}"
    return None
