"""Backends: refusals say what was asked and what is taken; `auto` picks; and every GPU
backend's argument building runs a whole replay on a CPU through a stand-in kernel."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from schedcheck.gpu import scenarios
from schedcheck.gpu.backends import choose_backend, flash_attn4, get_backend, torch_flash
from schedcheck.gpu.backends.base import BackendRefused, BackendSpec
from schedcheck.gpu.compare import VerifyOptions, verify_bundle
from schedcheck.gpu.model import make_model

from . import fakes


def spec(device="cuda", dtype=torch.bfloat16, block_size=16, head_dim=32, cap=(9, 0)):
    return BackendSpec(device, dtype, block_size, head_dim, 4, 2, cap if device == "cuda" else None)


@pytest.fixture
def with_fa4(monkeypatch):
    calls: list[dict] = []
    package = types.ModuleType("flash_attn")
    package.cute = fakes.fa4_module(calls)
    monkeypatch.setitem(sys.modules, "flash_attn", package)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", package.cute)
    return calls


@pytest.fixture
def with_fa2(monkeypatch):
    calls: list[dict] = []
    monkeypatch.setitem(sys.modules, "flash_attn", fakes.fa2_module(calls))
    return calls


def test_fa4_refusals(with_fa4) -> None:
    fa4 = get_backend("flash-attn-4")
    assert fa4.refusal(spec()) is None
    cases = {
        "device cpu": spec(device="cpu"),
        "compute capability (8, 0)": spec(cap=(8, 0)),
        "dtype fp32": spec(dtype=torch.float32),
        "head_dim 24 with block size 16": spec(head_dim=24),
        "head_dim 264 with block size 32": spec(head_dim=264, block_size=32),
    }
    for expected, s in cases.items():
        message = fa4.refusal(s)
        assert message is not None and expected in message, (expected, message)
        assert "it takes devices cuda (compute capability >= 9.0); dtypes fp16, bf16" in message
    assert fa4.refusal(spec(head_dim=24, block_size=32)) is None


def test_missing_kernels_are_named(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    assert "flash_attn.cute cannot be imported" in get_backend("flash-attn-4").refusal(spec())
    assert "flash_attn cannot be imported" in get_backend("flash-attn").refusal(spec())
    with pytest.raises(BackendRefused, match="install flash-attn-4"):
        choose_backend("flash-attn-4", spec())
    # on a CUDA machine without flash-attn, auto falls back to torch's own FA2 kernels
    assert choose_backend("auto", spec()).name == "torch-flash"


def test_other_refusals() -> None:
    assert "device cpu" in get_backend("torch-flash").refusal(spec(device="cpu"))
    assert "fp64 on cuda" in get_backend("sdpa").refusal(spec(dtype=torch.float64))
    assert get_backend("sdpa").refusal(spec(device="cpu", dtype=torch.float64)) is None
    assert get_backend("torch-ref").refusal(spec(device="cpu", dtype=torch.float64)) is None
    assert choose_backend("auto", spec(device="cpu", dtype=torch.float32)).name == "torch-ref"
    with pytest.raises(ValueError, match="unknown backend 'flash'"):
        get_backend("flash")
    with pytest.raises(BackendRefused, match="no backend takes"):
        choose_backend("auto", spec(device="xla"))


def test_fa2_pages_only_multiples_of_256(with_fa2) -> None:
    fa2 = get_backend("flash-attn")
    assert fa2.refusal(spec(cap=(8, 0))) is None
    assert "flash_attn 1.0 is not flash-attn 2.x" in _with_version(fa2, "1.0")


def _with_version(backend, version: str) -> str:
    sys.modules["flash_attn"].__version__ = version
    try:
        return backend.refusal(spec()) or ""
    finally:
        sys.modules["flash_attn"].__version__ = "2.7.4"


def _replay_verdicts(tmp_path: Path, backend, block_size: int) -> dict[str, str]:
    model = make_model(seed=0, dtype=torch.bfloat16)
    out = {}
    for scenario in (scenarios.prefix_chunked(block_size), scenarios.misaligned(block_size)[0]):
        bundle = scenarios.write_scenario_bundle(scenario, tmp_path / scenario.name)
        report = verify_bundle(bundle, VerifyOptions(dtype="bf16"), model=model, backend=backend)
        # bf16: a clean schedule may show a genuine near tie (seen at block size 256)
        out[scenario.name] = "ok" if report.exit_code == 0 else report.verdict
    return out


EXPECTED = {"prefix-chunked": "ok", "stale-block": "misaligned"}


def test_fa4_paged_call_replays_on_cpu(tmp_path: Path, with_fa4) -> None:
    verdicts = _replay_verdicts(tmp_path, flash_attn4.FlashAttn4Backend(), 16)
    assert verdicts == EXPECTED
    assert any(c["paged"] for c in with_fa4) and any(not c["paged"] for c in with_fa4)


@pytest.mark.parametrize("block_size", [16, 256])
def test_fa2_call_replays_on_cpu(tmp_path: Path, with_fa2, block_size: int) -> None:
    verdicts = _replay_verdicts(tmp_path, get_backend("flash-attn"), block_size)
    assert verdicts == EXPECTED
    assert any(c["paged"] for c in with_fa2) == (block_size % 256 == 0)


def test_torch_flash_call_replays_on_cpu(tmp_path: Path, monkeypatch) -> None:
    calls: list[dict] = []
    monkeypatch.setattr(torch_flash, "_aten_op", lambda: fakes.aten_flash(calls))
    assert _replay_verdicts(tmp_path, get_backend("torch-flash"), 16) == EXPECTED
    assert calls


def test_torch_flash_shapes_on_meta_tensors() -> None:
    """The real aten op's meta kernel accepts our arguments (GQA, varlen, int32)."""
    q = torch.empty(10, 4, 32, device="meta", dtype=torch.bfloat16)
    k = torch.empty(20, 2, 32, device="meta", dtype=torch.bfloat16)
    cu_q = torch.empty(3, device="meta", dtype=torch.int32)
    cu_k = torch.empty(3, device="meta", dtype=torch.int32)
    out = torch_flash.flash_forward(q, k, k, cu_q, cu_k, 6, 12, 0.17)
    assert out.shape == q.shape and out.dtype == torch.bfloat16
