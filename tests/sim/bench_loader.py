"""Load a benchmark script of bench/ as a module (they are scripts, not a package)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as a module of its own (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imported_bench(monkeypatch, name: str, *neighbours: str) -> Iterator[ModuleType]:
    """A fixture's body: bench/<name>.py imported as its script runs (bench/ on sys.path,
    for its imports of `neighbours`), all of them forgotten after the test."""
    monkeypatch.syspath_prepend(str(BENCH))
    yield importlib.import_module(name)
    for module in (name, *neighbours):
        sys.modules.pop(module, None)
