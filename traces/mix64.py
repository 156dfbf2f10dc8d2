"""SplitMix64's finalizer: the fixed integer mix behind every generated token id.

`tokens.py` keys a trace's tokens with it, the hash model (invariants/hash_model.py) its
identities and samples; `token_kernel.py` and invariants/hash_kernels.py compile the same
mix of one uint64. No Python `hash()`: the same value in every process.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MIX64_M1 = np.uint64(0xBF58476D1CE4E5B9)
MIX64_M2 = np.uint64(0x94D049BB133111EB)
MIX64_GOLDEN = np.uint64(0x9E3779B97F4A7C15)

_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)


def mix64(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finalizer, elementwise; wraps modulo 2**64. An array's integer
    arithmetic wraps silently, so it is done in place on one copy; a scalar's would warn,
    so it runs under an error state that ignores the overflow (the same values)."""
    if not isinstance(values, np.ndarray) or values.ndim == 0:
        with np.errstate(over="ignore"):
            z = values + MIX64_GOLDEN
            z = (z ^ (z >> _S30)) * MIX64_M1
            z = (z ^ (z >> _S27)) * MIX64_M2
            return z ^ (z >> _S31)
    z = values + MIX64_GOLDEN
    z ^= z >> _S30
    z *= MIX64_M1
    z ^= z >> _S27
    z *= MIX64_M2
    z ^= z >> _S31
    return z
