"""Every seed of a campaign, derived from its one `--seed` (numpy's SeedSequence).

    campaign seed S ──► worker w ──► round r ──► Hypothesis seed  SeedSequence([S, w, r])

A round's examples depend only on (S, w, r) and the code, never on wall time, the number
of workers, PYTHONHASHSEED or the order processes start in. SeedSequence mixes its entropy
with a fixed hash (no Python `hash()`), so the same triple gives the same seed everywhere.
"""

from __future__ import annotations

import numpy as np

SEED_BITS = 63


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from non-negative integers (order matters)."""
    assert parts and all(p >= 0 for p in parts), "seed parts are non-negative integers"
    state = np.random.SeedSequence(list(parts)).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 32 | int(state[1])) & ((1 << SEED_BITS) - 1)


def round_seed(campaign_seed: int, worker_index: int, round_index: int) -> int:
    """The Hypothesis seed of one round of one worker."""
    return derive_seed(campaign_seed, worker_index, round_index)
