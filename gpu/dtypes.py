"""Dtype names on the command line (fp64, fp32, bf16, fp16) <-> torch dtypes."""

from __future__ import annotations

import torch

from schedcheck.gpu.tolerances import DTYPE_NAMES

TORCH_DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
assert tuple(TORCH_DTYPES) == DTYPE_NAMES


def torch_dtype(name: str) -> torch.dtype:
    if name not in TORCH_DTYPES:
        raise ValueError(f"unknown dtype {name!r}: use one of {', '.join(DTYPE_NAMES)}")
    return TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    for name, value in TORCH_DTYPES.items():
        if value == dtype:
            return name
    raise ValueError(f"unsupported dtype {dtype}")


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype reductions run in: fp64 for fp64, fp32 for everything else."""
    return torch.float64 if dtype == torch.float64 else torch.float32
