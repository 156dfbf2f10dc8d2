"""The docs' own scripts and example engine, importable by the docs tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
EXAMPLES = DOCS / "examples"


def load_docs_module(path: Path) -> ModuleType:
    """Import a script under docs/ by its file path (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_{path.stem}", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def gen_reference() -> ModuleType:
    return load_docs_module(DOCS / "gen_reference.py")
