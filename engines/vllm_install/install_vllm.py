#!/usr/bin/env python3
"""Install one vLLM version into the running Python's environment, CPU only.

Called by the `vllm-*` tox envs through `commands_pre`, after tox has installed the
env's pure-Python pins (`requirements-vllm-*.txt` beside this file). Steps:

1. `pip install --no-deps vllm==VERSION` (and `xgrammar` for the v1 engine): vLLM's own
   requirements pin a CUDA torch and a GPU stack that the scheduler never touches;
2. v0 versions only: remove the CUDA extensions (`vllm/_C.abi3.so`, `_core_C.abi3.so`,
   `_moe_C.abi3.so`), which cannot load against the CPU torch; `vllm/_core_ext.py` then
   falls back to pure Python;
3. v0 versions only: write a `pyairports` stub into site-packages (outlines<0.1 imports
   `pyairports.airports.AIRPORT_LIST`; PyPI's pyairports 0.0.1 is an empty placeholder).

Idempotent: a venv that already holds the version (and the stub, and no .so) is left as
it is, so tox's cached env costs nothing on the next run. Nothing of vLLM is committed.

Usage: python install_vllm.py 0.33.0 | 0.5.4 | 0.6.0
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import sysconfig
from pathlib import Path

CUDA_EXTENSIONS = ("_C.abi3.so", "_core_C.abi3.so", "_moe_C.abi3.so")
PYAIRPORTS_STUB = '''"""Stub from schedcheck's install_vllm.py: outlines<0.1 imports this list."""

AIRPORT_LIST: list = []
'''
V1_EXTRA_NO_DEPS = ("xgrammar",)


def is_v0(version: str) -> bool:
    """True for the v0-engine releases we drive (0.5.x, 0.6.x)."""
    return version.startswith(("0.5.", "0.6."))


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def pip_install_no_deps(specs: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *specs]
    print("install_vllm:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def remove_cuda_extensions(vllm_dir: Path) -> None:
    for name in CUDA_EXTENSIONS:
        path = vllm_dir / name
        if path.exists():
            print(f"install_vllm: removing {path}", flush=True)
            path.unlink()


def write_pyairports_stub(site: Path) -> None:
    pkg = site / "pyairports"
    pkg.mkdir(exist_ok=True)
    init = pkg / "__init__.py"
    if not init.exists():
        init.write_text("")
    (pkg / "airports.py").write_text(PYAIRPORTS_STUB)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    version = argv[0]
    specs = []
    if installed_version("vllm") != version:
        specs.append(f"vllm=={version}")
    if not is_v0(version):
        specs += [d for d in V1_EXTRA_NO_DEPS if installed_version(d) is None]
    if specs:
        pip_install_no_deps(specs)
    site = site_packages()
    if is_v0(version):
        remove_cuda_extensions(site / "vllm")
        write_pyairports_stub(site)
    assert installed_version("vllm") == version, "vllm did not install"
    print(f"install_vllm: vllm {version} ready in {site}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
