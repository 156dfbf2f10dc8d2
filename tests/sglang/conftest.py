"""Tests marked `sglang` drive a real SGLang; without one importable they skip cleanly."""

from __future__ import annotations

import importlib.util

import pytest

HAS_SGLANG = importlib.util.find_spec("sglang") is not None

if HAS_SGLANG:  # before any test module imports sglang: its GPU-only imports are stubbed
    from schedcheck.engines.sglang import stubs

    stubs.install()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_SGLANG:
        return
    skip = pytest.mark.skip(reason="sglang is not importable (run tox -e sglang)")
    for item in items:
        if "sglang" in item.keywords:
            item.add_marker(skip)
