"""flash-attn-4 on a CPU: our two calls pass FA4's own argument checks and compile for Hopper.

The H200's preferred backend cannot run here, but FA4 recognises torch's FakeTensorMode: on
fake CUDA tensors it skips the device check and the launch, and runs every argument check
and the CuTe DSL compile for the target it is told (`tox -e fa4-compile` sets
FLASH_ATTENTION_ARCH=sm_90, CUTE_DSL_ARCH=sm_90a, FLASH_ATTENTION_NUM_SMS=132). So a wrong
dtype, layout or argument combination in `FlashAttn4Backend` fails here, not on the GPU
lease. Nothing is computed: the numbers are the GPU job's (gpu/device_check.sh).

Step shape used (block size 16, 64 blocks, H=4 over Hk=2)::

    request        chunk    decode   whole prompt
    query_len      5        1        16
    seq_len        37       20       16
    blocks         0 1 2    3 4      5            padding: the zero block (63)
"""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest

from schedcheck.gpu.backends.base import AttnBatch
from schedcheck.gpu.backends.flash_attn4 import FlashAttn4Backend

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.fa4,
    pytest.mark.skipif(
        importlib.util.find_spec("flash_attn") is None
        or "FLASH_ATTENTION_ARCH" not in os.environ
        or torch.cuda.is_available(),
        reason="cross-compiles flash-attn-4 on a CPU: tox -e fa4-compile",
    ),
]

NUM_BLOCKS, BLOCK_SIZE, ZERO_BLOCK = 64, 16, 63
NUM_HEADS, NUM_KV_HEADS = 4, 2
QUERY_LENS, SEQ_LENS = (5, 1, 16), (37, 20, 16)
TABLE = np.array([[0, 1, 2], [3, 4, ZERO_BLOCK], [5, ZERO_BLOCK, ZERO_BLOCK]], dtype=np.int32)


def _fake_cuda(array: np.ndarray) -> torch.Tensor:
    """A fake CUDA tensor of `array` (`.to("cuda")` needs a CUDA build; this does not)."""
    dtype = torch.from_numpy(array[:0]).dtype
    return torch.tensor(array.tolist(), dtype=dtype, device="cuda")


def _batch(table: np.ndarray, head_dim: int) -> AttnBatch:
    qsl = np.zeros(len(QUERY_LENS) + 1, dtype=np.int32)
    np.cumsum(QUERY_LENS, out=qsl[1:])
    seq_lens = np.asarray(SEQ_LENS, dtype=np.int32)
    scale = 1.0 / math.sqrt(head_dim)
    return AttnBatch.from_host(qsl, seq_lens, table, BLOCK_SIZE, scale, _fake_cuda)


def _paged(dtype: torch.dtype, head_dim: int, table: np.ndarray = TABLE) -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), torch.inference_mode():  # as the executor runs
        batch = _batch(table, head_dim)
        num_rows = sum(QUERY_LENS)
        q = torch.empty(num_rows, NUM_HEADS, head_dim, dtype=dtype, device="cuda")
        cache_shape = (NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, head_dim)
        key_cache = torch.zeros(cache_shape, dtype=dtype, device="cuda")
        value_cache = torch.zeros(cache_shape, dtype=dtype, device="cuda")
        return FlashAttn4Backend().paged(q, key_cache, value_cache, batch)


def _dense(dtype: torch.dtype, head_dim: int, num_tokens: int = 37) -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), torch.inference_mode():
        # views of (T, heads * head_dim) projections, as the model makes them
        q = torch.empty(num_tokens, NUM_HEADS * head_dim, dtype=dtype, device="cuda")
        kv = torch.empty(num_tokens, NUM_KV_HEADS * head_dim, dtype=dtype, device="cuda")
        shape = (num_tokens, NUM_KV_HEADS, head_dim)
        return FlashAttn4Backend().dense(
            q.view(num_tokens, NUM_HEADS, head_dim),
            kv.view(shape),
            kv.view(shape),
            1.0 / math.sqrt(head_dim),
        )


def test_the_backend_finds_flash_attn_cute():
    assert FlashAttn4Backend().unavailable() is None


@pytest.mark.parametrize("head_dim", [32, 64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_paged_step_compiles(dtype, head_dim):
    out = _paged(dtype, head_dim)
    assert (tuple(out.shape), out.dtype, out.device.type) == (
        (sum(QUERY_LENS), NUM_HEADS, head_dim),
        dtype,
        "cuda",
    )


@pytest.mark.parametrize("head_dim", [32, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_dense_baseline_compiles(dtype, head_dim):
    out = _dense(dtype, head_dim)
    assert (tuple(out.shape), out.dtype, out.device.type) == (
        (37, NUM_HEADS, head_dim),
        dtype,
        "cuda",
    )


@pytest.mark.parametrize("head_dim", [24, 48])
def test_head_dims_the_backend_takes_are_those_fa4_compiles_at_block_size_16(head_dim):
    """head_dim_ok says a multiple of 16 at block size 16; FA4 agrees: 48 compiles, 24 is
    refused ("Paged KV does not support irregular head dim")."""
    takes = FlashAttn4Backend().head_dim_ok(head_dim, BLOCK_SIZE)
    if takes:
        assert _paged(torch.bfloat16, head_dim).shape[-1] == head_dim
    else:
        with pytest.raises(AssertionError, match="irregular head dim"):
            _paged(torch.bfloat16, head_dim)
    assert takes == (head_dim == 48)


def test_fa4_refuses_what_the_backend_must_never_pass():
    """The check can fail: an int64 page table and fp32 inputs are refused before any
    compile (the backend converts the table to int32 and declares fp16/bf16 only)."""
    with pytest.raises(AssertionError, match="page_table must be int32"):
        _paged(torch.bfloat16, 32, TABLE.astype(np.int64))
    with pytest.raises(AssertionError, match="inputs must be float16, bfloat16"):
        _paged(torch.float32, 32)
    assert torch.float32 not in FlashAttn4Backend.dtypes
