"""Random prompt text: token ids drawn from the generator, never from Python's hash()."""

from __future__ import annotations

import numpy as np

from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE, FIRST_TOKEN_ID


def random_tokens(
    rng: np.random.Generator, length: int, vocab_size: int = DEFAULT_VOCAB_SIZE
) -> tuple[int, ...]:
    """`length` token ids uniform in [FIRST_TOKEN_ID, vocab_size) (special ids left out)."""
    assert length >= 0
    assert vocab_size > FIRST_TOKEN_ID
    return tuple(rng.integers(FIRST_TOKEN_ID, vocab_size, size=length).tolist())
