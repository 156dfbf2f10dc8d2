"""GPU test setup: torch is required here; tests marked `gpu` skip without a CUDA device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="tests/gpu needs torch (the gpu extra)")


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture
def small_config():
    """A model small enough for milliseconds per forward (vocab 512)."""
    from schedcheck.gpu.model import ModelConfig

    return ModelConfig(vocab_size=512)
