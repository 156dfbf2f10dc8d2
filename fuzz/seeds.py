"""Every seed of a campaign, derived from its one `--seed` (numpy's SeedSequence).

    campaign seed S ──► round r ──► Hypothesis seed  SeedSequence([S, 0, r])

A campaign is one stream of rounds; rounds are dealt to whoever runs them (one process,
N worker processes: worker w runs rounds w, w + N, ...; or Ray tasks on a cluster), and
the finding is the one of the least round. A round's examples depend only on (S, r) and
the code, never on wall time, on who ran the round, on the number of workers,
PYTHONHASHSEED or the order processes start in: a seed gives the same finding on one
process, N processes or a cluster. SeedSequence mixes its entropy with a fixed hash (no
Python `hash()`), so the same pair gives the same seed everywhere. (The 0 is the stream:
it keeps every one-worker campaign's seeds what they were when each worker had its own.)
"""

from __future__ import annotations

import numpy as np

SEED_BITS = 63


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from non-negative integers (order matters)."""
    assert parts and all(p >= 0 for p in parts), "seed parts are non-negative integers"
    state = np.random.SeedSequence(list(parts)).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 32 | int(state[1])) & ((1 << SEED_BITS) - 1)


STREAM = 0


def round_seed(campaign_seed: int, round_index: int) -> int:
    """The Hypothesis seed of one round of a campaign, whoever runs it."""
    return derive_seed(campaign_seed, STREAM, round_index)
