"""Tests marked `vllm` drive a real vLLM; without one importable they skip cleanly."""

from __future__ import annotations

import importlib.util

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_VLLM:
        return
    skip = pytest.mark.skip(reason="vllm is not importable (run a vllm-* tox env)")
    for item in items:
        if "vllm" in item.keywords:
            item.add_marker(skip)
