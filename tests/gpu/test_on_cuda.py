"""On a CUDA device: every backend that takes bf16 replays the scenarios as pinned.

Skipped without CUDA (tests/gpu/conftest.py); `gpu/device_check.sh` runs these first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from schedcheck.gpu import scenarios
from schedcheck.gpu.backends import PREFERENCE, get_backend
from schedcheck.gpu.backends.base import BackendSpec
from schedcheck.gpu.compare import VerifyOptions, verify_bundle
from schedcheck.gpu.model import make_model

pytestmark = [  # the skipif too, so this module also runs under --noconftest (device_check.sh)
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
BS = 16


def _spec() -> BackendSpec:
    return BackendSpec.for_device(
        "cuda", dtype=torch.bfloat16, block_size=BS, head_dim=32, num_heads=4, num_kv_heads=2
    )


@pytest.mark.parametrize("name", PREFERENCE)
def test_backend_replays_scenarios_as_pinned(tmp_path: Path, name: str) -> None:
    backend = get_backend(name)
    reason = backend.refusal(_spec())
    if reason is not None:
        pytest.skip(reason)
    model = make_model(seed=0, device="cuda", dtype=torch.bfloat16)
    for scenario in scenarios.clean(BS) + scenarios.misaligned(BS):
        bundle = scenarios.write_scenario_bundle(scenario, tmp_path / scenario.name)
        report = verify_bundle(
            bundle, VerifyOptions(device="cuda", dtype="bf16"), model=model, backend=backend
        )
        first = {r: (f.kind, f.step, f.position) for r, f in report.first_divergence().items()}
        if scenario.expected:
            assert first == scenario.expected, scenario.name
        else:
            assert report.verdict != "misaligned", (scenario.name, first)


def test_paged_kernels_agree_with_the_oracle_on_cuda() -> None:
    from schedcheck.gpu.kv_cache import PagedKVCache

    from .helpers import attn_batch

    gen = torch.Generator(device="cuda").manual_seed(0)
    cache = PagedKVCache(1, 64, BS, 2, 32, device="cuda", dtype=torch.bfloat16, initial_blocks=64)
    k = torch.randn(64 * BS, 2, 32, generator=gen, device="cuda", dtype=torch.bfloat16)
    cache.write(0, k, -k, torch.arange(64 * BS, device="cuda"))
    batch = attn_batch(
        [[5, 9, 2], [7], [3, 4]], [20, 1, 17], [40, 9, 17], BS, 0.17, cache.zero_block_id
    )
    batch = type(batch)(
        batch.query_start_loc.cuda(),
        batch.seq_lens.cuda(),
        batch.block_table.cuda(),
        batch.block_table_np,
        batch.seq_lens_np,
        batch.query_start_loc_np,
        BS,
        0.17,
    )
    q = torch.randn(38, 4, 32, generator=gen, device="cuda", dtype=torch.bfloat16)
    ref = get_backend("torch-ref").paged(q, cache.key_cache[0], cache.value_cache[0], batch)
    for name in PREFERENCE[:-1]:
        backend = get_backend(name)
        if backend.refusal(_spec()) is not None:
            continue
        out = backend.paged(q, cache.key_cache[0], cache.value_cache[0], batch)
        assert (out.float() - ref.float()).abs().max().item() < 1.5e-2, name
