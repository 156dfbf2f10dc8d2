"""GPU test setup: torch is required here; tests marked `gpu` skip without a CUDA device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="tests/gpu needs torch (the gpu extra)")
# The model is tiny: one thread per test process is fastest, and far faster than two
# threads spinning against each other on a loaded machine.
torch.set_num_threads(1)


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
