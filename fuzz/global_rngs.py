"""The global generators Hypothesis manages: seeded for every example, restored once per round.

Hypothesis runs each example with the global generators it manages seeded, and restores
their states after it (`hypothesis.internal.entropy.deterministic_PRNG`), so a test that
draws from `random` or `np.random` without a seed still runs the same every time. It
reads each state before the example and puts it back after: for numpy's global generator
(managed once numpy is imported) `np.random.get_state` and `set_state` take 114 us, and
the `random` module's and Hypothesis' own `Random` some 10-30 us more, together about 2 %
of a fuzz example on the reference engine, for generators no code of schedcheck draws from
(each run draws from its own seeded `np.random.Generator`; an engine under test may).

`global_rngs_restored_per_round()` keeps what an example sees and changes when the states
are put back:

    Hypothesis alone:   | get, seed 0, example, set | get, seed 0, example, set | ...
    within the round:   save | seed 0, example | seed 0, example | ... | restore

Every example still starts from the state seed 0 gives, as under Hypothesis alone (a
state set from a copy made once: 2-4 us a generator), and each generator's state after
the round is the one it had before it. Generators registered otherwise
(`hypothesis.register_random`) are managed as Hypothesis manages them. Private API, like
draws.py's: where Hypothesis keeps none of these under the names read here, nothing is
swapped (tests/fuzz/test_global_rngs.py checks that all three are on the Hypothesis
installed).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from hypothesis.internal import entropy


class _SeededOnly:
    """What Hypothesis manages in a generator's place within a round: seeding it as
    Hypothesis would (`seed(s)`, or `setstate(seeded)` for the `random` module), and no
    state read or put back per example (`getstate()` gives None)."""

    def __init__(self, seed: Callable[[int], None], setstate: Callable[[Any], None]) -> None:
        self._seed, self._setstate = seed, setstate

    def seed(self, seed: int) -> None:
        self._seed(seed)

    def getstate(self) -> None:
        return None

    def setstate(self, state: Any) -> None:
        if state is not None:  # None: what getstate gave, put back: nothing to do
            self._setstate(state)


@contextlib.contextmanager
def global_rngs_restored_per_round() -> Iterator[None]:
    """Within: Hypothesis seeds the global generators for each example, but neither reads
    nor restores their states; on exit each state is the one it had on entry."""
    managed: Any = getattr(entropy, "RANDOMS_TO_MANAGE", None)
    if managed is None or not hasattr(entropy, "NP_RANDOM"):
        yield  # a Hypothesis that keeps them otherwise: it manages them as it will
        return
    if entropy.NP_RANDOM is None:
        entropy.get_seeder_and_restorer(0)  # registers numpy's, as a first example would
    originals = {key: ref() for key, ref in sorted(managed.data.items())}
    swaps = {key: _seeded_only(r) for key, r in originals.items()}
    swaps = {key: s for key, s in swaps.items() if s is not None}
    saved = {key: originals[key].getstate() for key in swaps}
    np_wrapper = entropy.NP_RANDOM
    for key, seeded_only in swaps.items():  # bounded: the managed generators
        managed[key] = seeded_only  # a weak reference: `swaps` keeps it alive
        if originals[key] is np_wrapper:
            entropy.NP_RANDOM = seeded_only
    try:
        yield
    finally:
        for key in swaps:  # bounded: the managed generators
            managed[key] = originals[key]
            originals[key].setstate(saved[key])
        entropy.NP_RANDOM = np_wrapper


def _seeded_only(r: Any) -> _SeededOnly | None:
    """The stand-in for a managed generator this module knows (None: left as it is)."""
    if isinstance(r, entropy.NumpyRandomWrapper):
        return _SeededOnly(np.random.seed, np.random.set_state)
    if r is random or type(r) is random.Random:
        return _SeededOnly(_seed_from_copies(r.setstate), r.setstate)
    return None


_SEEDED_STATES: dict[int, object] = {}  # seed -> random.Random(seed)'s state
SEEDED_STATES_MAX = 8  # Hypothesis seeds with 0 alone


def _seed_from_copies(setstate: Callable[[Any], None]) -> Callable[[int], None]:
    """`Random.seed(s)` for a plain seed, as a state set from a copy made once."""

    def seed(s: int) -> None:
        state = _SEEDED_STATES.get(s)
        if state is None:
            state = random.Random(s).getstate()
            if len(_SEEDED_STATES) < SEEDED_STATES_MAX:
                _SEEDED_STATES[s] = state
        setstate(state)

    return seed
