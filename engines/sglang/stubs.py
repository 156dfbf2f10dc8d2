"""Stand-ins for the two GPU-only packages SGLang's scheduler path imports on a CPU.

- `sgl_kernel`: SGLang's CUDA kernels (PyPI has no CPU build). SGLang's own CPU tests
  stub it (`sglang.test.test_utils.maybe_stub_sgl_kernel`: a meta-path finder whose
  modules answer every attribute with a `MagicMock`); we do the same here, without
  importing `sglang.test.test_utils` (it pulls the benchmark stack and torchvision).
- `torchvision`: imported only by multimodal helpers on the text-only path
  (`sglang/srt/multimodal/internvl_utils.py`); the PyPI wheels either pull a CUDA torch
  or do not load on the CPU torch 2.13.0. Its modules are inert the same way; it has no
  distribution metadata, so `transformers` still reports torchvision unavailable.

Install before the first `import sglang`; idempotent. No scheduler or KV-cache code path
calls into either package (the allocators use their torch fallbacks on a CPU).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from unittest.mock import MagicMock

STUBBED_PACKAGES = ("sgl_kernel", "torchvision")


class _InertLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        stub_name = module.__name__
        module.__getattr__ = lambda name: MagicMock(name=f"{stub_name}.{name}")  # type: ignore[method-assign]
        if module.__name__ == "torchvision":
            module.__version__ = "0.0.0+schedcheck.stub"  # type: ignore[attr-defined]


class _InertFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in STUBBED_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _InertLoader(), is_package=True)
        return None


def install() -> None:
    """Put the finder first on sys.meta_path (once)."""
    if not any(isinstance(f, _InertFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _InertFinder())
