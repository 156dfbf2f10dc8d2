"""Fault points inside the loop, activated per run with a probability (FoundationDB's BUGGIFY).

Before each step, every fault kind with probability p > 0 fires with probability p, drawn
from the run's one seeded generator, in the fixed order of FAULT_KINDS (so a seed gives the
same faults whatever the engine supports):

    preempt          the engine preempts running requests its own way (engine.inject_fault:
                     one, or every running one as a weight update's pause or cache reset does)
    abort-mid-chunk  the loop aborts a request between two chunks of its prefill
    evict            the engine evicts a burst of cached free blocks (engine.inject_fault)
    reduced-budget   the engine's next step gets a smaller token budget (engine.inject_fault)

Engine-level kinds need an optional engine method `inject_fault(kind, rng) -> str | None`
(`FaultInjectable`: a description of what it did, or None when nothing applied); engines
without it skip them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import numpy as np

FAULT_KINDS = ("preempt", "abort-mid-chunk", "evict", "reduced-budget")
ENGINE_FAULTS = frozenset({"preempt", "evict", "reduced-budget"})


@runtime_checkable
class FaultInjectable(Protocol):
    def inject_fault(self, kind: str, rng: np.random.Generator) -> str | None:
        """Fire fault `kind` (one of ENGINE_FAULTS) now; what it did, or None."""
        ...


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


class FaultInjector:
    """Fires the run's faults before a step: the loop's own (abort-mid-chunk) and the
    engine's, where it has them (`FaultInjectable`)."""

    def __init__(
        self,
        faults: Mapping[str, float],
        rng: Callable[[], np.random.Generator],
        engine: FaultInjectable | None,
        call: Callable[..., str | None],
    ) -> None:
        self.faults, self.rng, self.engine, self.call = faults, rng, engine, call
        self.armed = any(p > 0.0 for p in faults.values())  # else no step draws

    def fire(
        self,
        step: int,
        mid_prefill: Callable[[], list[str]],
        abort: Callable[[str], None],
        fired: list[str],
    ) -> None:
        """Draw this step's faults and fire them; each that did something is appended to
        `fired` ("step N: kind: what"). `mid_prefill`: the live requests between two
        chunks of their prefill (`abort` aborts one)."""
        if not self.armed:
            return
        for kind in draw_faults(self.faults, self.rng()):
            if kind == "abort-mid-chunk":
                what = self._abort_one(mid_prefill(), abort)
            elif self.engine is not None:
                what = self.call("inject_fault", self.engine.inject_fault, kind, self.rng())
            else:
                what = None
            if what:
                fired.append(f"step {step}: {kind}: {what}")

    def _abort_one(self, candidates: list[str], abort: Callable[[str], None]) -> str | None:
        if not candidates:
            return None
        victim = candidates[int(self.rng().integers(len(candidates)))]
        abort(victim)
        return f"aborted {victim}"
