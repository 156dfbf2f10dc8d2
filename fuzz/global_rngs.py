"""numpy's global generator seeded for every example, and restored once per round.

Hypothesis runs each example with the global generators it manages seeded, and restores
their states after it (`hypothesis.internal.entropy.deterministic_PRNG`), so a test that
draws from `np.random` without a seed still runs the same every time. Once numpy is
imported it manages numpy's global generator too, through `np.random.get_state` and
`set_state`: 114 us an example on these machines, about 2 % of a fuzz example on the
reference engine, for a generator no code of schedcheck draws from (each run draws from
its own seeded `np.random.Generator`; an engine under test may draw from it).

`numpy_restored_per_round()` keeps what an example sees and changes when the state is
put back:

    Hypothesis alone:   | get, seed 0, example, set | get, seed 0, example, set | ...
    within the round:   save | seed 0, example | seed 0, example | ... | restore

Every example still starts from `np.random.seed(0)`, as under Hypothesis alone (2 us), and
the process's state after the round is the one it had before it. Private API, like
draws.py's: where Hypothesis keeps no numpy wrapper under these names, nothing is swapped
(tests/fuzz/test_global_rngs.py checks that it is swapped on the Hypothesis installed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis.internal import entropy


class _SeededOnly:
    """What Hypothesis manages in numpy's place: seeding as Hypothesis' wrapper seeds; no
    state read or put back per example (the round does that once)."""

    def seed(self, seed: int) -> None:
        np.random.seed(seed)

    def getstate(self) -> None:
        return None

    def setstate(self, state: None) -> None:
        assert state is None, "a state this wrapper did not give"


@contextlib.contextmanager
def numpy_restored_per_round() -> Iterator[None]:
    """Within: Hypothesis seeds numpy's global generator for each example but neither
    reads nor restores its state; on exit that state is the one it had on entry."""
    key = _numpy_key()
    if key is None:  # a Hypothesis without the wrapper: it manages numpy as it will
        yield
        return
    wrapper, saved = entropy.NP_RANDOM, np.random.get_state()
    seeded_only = _SeededOnly()
    entropy.NP_RANDOM = seeded_only  # kept alive: RANDOMS_TO_MANAGE holds weak references
    entropy.RANDOMS_TO_MANAGE[key] = seeded_only
    try:
        yield
    finally:
        entropy.RANDOMS_TO_MANAGE[key] = wrapper
        entropy.NP_RANDOM = wrapper
        np.random.set_state(saved)


def _numpy_key() -> int | None:
    """The key Hypothesis manages numpy's global generator under (registered now, as its
    first example would register it), or None."""
    managed: Any = getattr(entropy, "RANDOMS_TO_MANAGE", None)
    if managed is None or not hasattr(entropy, "NP_RANDOM"):
        return None
    if entropy.NP_RANDOM is None:
        entropy.get_seeder_and_restorer(0)  # registers the wrapper; seeds nothing
    keys = [key for key, ref in managed.data.items() if ref() is entropy.NP_RANDOM]
    return keys[0] if len(keys) == 1 and isinstance(keys[0], int) else None
