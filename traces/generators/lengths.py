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
            assert self._k_range()[0] <= self._k_range()[1], (
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
        k_min, k_max = self._k_range()
        candidates = np.arange(k_min, k_max + 1, dtype=np.int64)[:, None] * self.block_size
        values = (candidates + np.array([-1, 0, 1], dtype=np.int64)[None, :]).ravel()
        values = values[(values >= self.low) & (values <= self.high)]
        return rng.choice(values, size=count)

    def _k_range(self) -> tuple[int, int]:
        """The k with some k*B+d (d in -1..1) in [low, high]; k >= 1."""
        size = self.block_size
        k_min = max(1, -(-(self.low - 1) // size))  # ceil((low - 1) / B)
        k_max = (self.high + 1) // size
        return k_min, k_max
