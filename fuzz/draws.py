"""What a seed draws depends on the seed and this code alone, not on what a process loaded.

Hypothesis draws about 5 % of its integers, floats and strings from constants: a fixed
global set, and the literals of every "local" module (not the standard library, not
site-packages, not a test file) loaded in the process when the draw happens
(`hypothesis.internal.conjecture.providers._get_local_constants`, Hypothesis >= 6.131).
A campaign's examples then depended on which modules a process had imported: the CLI, a
spawned worker, a Ray worker and a pytest worker (whatever tests ran before in it) draw
different examples from one seed, which broke "a round's seed depends on (S, r) alone"
(seeds.py) and made tests/fuzz/test_campaign.py's one-worker / two-worker comparison
flaky; and any new integer literal anywhere in the repository changed what seeds draw.

`keep_draws_local_free()` gives Hypothesis an empty set of local constants (the global
ones stay: they are fixed by the Hypothesis version). It is private API; should it move,
`tests/fuzz/test_draws.py` fails (a seed's draws change when a module with new literals
is loaded).
"""

from __future__ import annotations

from hypothesis.internal.conjecture import providers


def keep_draws_local_free() -> None:
    """From now on, no constant of a loaded module is drawn (idempotent)."""
    empty = providers.Constants()  # what Hypothesis starts its local constants from
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()  # pools built with local constants before
