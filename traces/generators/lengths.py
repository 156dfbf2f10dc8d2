"""Length choices for generated prompts and outputs, including block-boundary lengths.

fixed     every length = low (= high)
uniform   integers in [low, high], uniform
boundary  k * block_size + d with d in {-1, 0, +1}, uniform over the k and d that fall
          in [low, high]: the lengths where off-by-one bugs live

block_size 16:  ... 15 16 17 ... 31 32 33 ... 47 48 49 ...
                    └─k=1─┘      └─k=2─┘      └─k=3─┘
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

LengthKind = Literal["fixed", "uniform", "boundary"]


@dataclass(frozen=True, slots=True)
class LengthSpec:
    """How to draw lengths: `kind` over the inclusive range [low, high]."""

    kind: LengthKind
    low: int
    high: int
    block_size: int = 16  # boundary only

    def __post_init__(self) -> None:
        assert self.kind in ("fixed", "uniform", "boundary"), self.kind
        assert 0 <= self.low <= self.high, "0 <= low <= high"
        assert self.kind != "fixed" or self.low == self.high, "fixed: low == high"
        assert self.block_size >= 2, "block_size >= 2 (so k * block_size - 1 >= 1)"
        if self.kind == "boundary":
            assert LengthSpec.boundary_possible(self.low, self.high, self.block_size), (
                f"no k*{self.block_size}+-1 in [{self.low}, {self.high}]"
            )

    @staticmethod
    def fixed(length: int) -> LengthSpec:
        return LengthSpec("fixed", length, length)

    @staticmethod
    def uniform(low: int, high: int) -> LengthSpec:
        return LengthSpec("uniform", low, high)

    @staticmethod
    def boundary(low: int, high: int, block_size: int) -> LengthSpec:
        return LengthSpec("boundary", low, high, block_size)

    @staticmethod
    def boundary_possible(low: int, high: int, block_size: int) -> bool:
        """True iff some k * block_size + d (k >= 1, d in -1..1) lies in [low, high]."""
        if block_size < 2 or low > high:
            return False
        k_min, k_max = _k_range(low, high, block_size)
        return k_min <= k_max

    def sample(self, rng: np.random.Generator, count: int) -> npt.NDArray[np.int64]:
        """`count` lengths drawn from `rng` (fixed draws nothing)."""
        assert count >= 0
        if self.kind == "fixed":
            lengths = np.full(count, self.low, dtype=np.int64)
        elif self.kind == "uniform":
            lengths = rng.integers(self.low, self.high, size=count, endpoint=True, dtype=np.int64)
        else:
            lengths = self._sample_boundary(rng, count)
        assert lengths.shape == (count,)
        assert count == 0 or (int(lengths.min()) >= self.low and int(lengths.max()) <= self.high)
        return lengths

    def _sample_boundary(self, rng: np.random.Generator, count: int) -> npt.NDArray[np.int64]:
        """Uniform over the valid (k, d) pairs: k in the k range, d in {-1, 0, +1}."""
        k_min, k_max = _k_range(self.low, self.high, self.block_size)
        candidates = np.arange(k_min, k_max + 1, dtype=np.int64)[:, None] * self.block_size
        values = (candidates + np.array([-1, 0, 1], dtype=np.int64)[None, :]).ravel()
        values = values[(values >= self.low) & (values <= self.high)]
        return rng.choice(values, size=count)


def _k_range(low: int, high: int, block_size: int) -> tuple[int, int]:
    """The k >= 1 with some k * block_size + d (d in -1..1) in [low, high]."""
    k_min = max(1, -(-(low - 1) // block_size))  # ceil((low - 1) / B)
    k_max = (high + 1) // block_size
    return k_min, k_max
