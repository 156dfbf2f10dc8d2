#!/usr/bin/env python3
"""Install SGLang into the running Python's environment, CPU only, without its deps.

Called by the `sglang` tox env through `commands_pre`, after tox has installed the
env's pure-Python pins (`requirements-sglang.txt` beside this file):

    pip install --no-deps sglang==0.5.23

SGLang's own requirements pin a CUDA torch (2.14.1), flashinfer and sgl-kernel, none of
which the scheduler path needs; the two GPU-only imports it does reach (`sgl_kernel`,
`torchvision`) are stubbed in-process by the adapter (`engines/sglang/stubs.py`), so
nothing is written into site-packages beyond SGLang itself. Leave SGLANG_USE_CPU_ENGINE
unset: with it, `mem_cache/allocation.py` imports a CPU sgl_kernel op PyPI does not ship.

Idempotent: a venv that already holds the version is left as it is.

Usage: python install_sglang.py [0.5.23]
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

DEFAULT_VERSION = "0.5.23"


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__, file=sys.stderr)
        return 2
    version = argv[0] if argv else DEFAULT_VERSION
    if installed_version("sglang") != version:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", f"sglang=={version}"]
        print("install_sglang:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    assert installed_version("sglang") == version, "sglang did not install"
    print(f"install_sglang: sglang {version} ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
