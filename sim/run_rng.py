"""The run's one random generator (faults, drafts), built at its first draw.

Most fuzz runs draw nothing from it: no fault is armed and no request has drafts (359 of
640 reference scenarios drew from it). Building one (a PCG64 from a SeedSequence) costs
30-40 us inside a run, 7.7 us timed alone: about 1 % of a reference fuzz example spent on a
generator most examples never use. Built later, it is the same generator: the same seed,
and one object that every user draws from in turn.
"""

from __future__ import annotations

import numpy as np


class RunRng:
    """`np.random.default_rng(seed)`, built at the first call."""

    __slots__ = ("_generator", "_seed")

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._generator: np.random.Generator | None = None

    def __call__(self) -> np.random.Generator:
        if self._generator is None:
            self._generator = np.random.default_rng(self._seed)
        return self._generator

    @property
    def built(self) -> bool:
        return self._generator is not None
