"""Fault points inside the loop, activated per run with a probability (FoundationDB's BUGGIFY).

Before each step, every fault kind with probability p > 0 fires with probability p, drawn
from the run's one seeded generator, in the fixed order of FAULT_KINDS (so a seed gives the
same faults whatever the engine supports):

    preempt          the engine preempts one running request (engine.inject_fault)
    abort-mid-chunk  the loop aborts a request between two chunks of its prefill
    evict            the engine evicts a burst of cached free blocks (engine.inject_fault)
    reduced-budget   the engine's next step gets a smaller token budget (engine.inject_fault)

Engine-level kinds need an optional engine method `inject_fault(kind, rng) -> str | None`
(a description of what it did, or None when nothing applied); engines without it skip them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

FAULT_KINDS = ("preempt", "abort-mid-chunk", "evict", "reduced-budget")
ENGINE_FAULTS = frozenset({"preempt", "evict", "reduced-budget"})


def check_faults(faults: Mapping[str, float]) -> None:
    """Raise ValueError naming an unknown kind or a probability outside [0, 1]."""
    for kind, p in faults.items():
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}: use {', '.join(FAULT_KINDS)}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"fault {kind}: probability {p} outside [0, 1]")


def draw_faults(faults: Mapping[str, float], rng: np.random.Generator) -> list[str]:
    """The kinds that fire before this step (one draw per configured kind, in fixed order)."""
    fired = []
    for kind in FAULT_KINDS:
        p = faults.get(kind, 0.0)
        if p > 0.0 and rng.random() < p:
            fired.append(kind)
    return fired
