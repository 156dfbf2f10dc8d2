"""The mutant catalog and its code: real bug classes re-created outside the clean engine.

A mutant is switched on by `EngineConfig.mutant` (the CLI's `--mutant NAME`); with none the
engine is built from the clean classes. The clean code never tests for a mutant:

- an engine mutant (component scheduler, hashed or radix) is a subclass of one clean class
  that overrides the named step where the real bug was; `engine_parts(name, block_manager)`
  gives the classes `ReferenceEngine` builds (the one place a configured mutant is applied);
- a runner mutant is a function from the clean runner metadata of a step to the metadata
  the buggy runner derives (`apply_runner_mutant`, called by the simulator after
  `build_metadata`), so it applies to any engine's schedule.

Modules: `catalog.py` (the entries `schedcheck mutants list` prints), `scheduler.py`,
`hashed.py`, `radix.py`, `runner.py` (one per component), `parts.py` (EngineParts).
"""

from __future__ import annotations

from schedcheck.engines.reference.mutants.catalog import (
    COMPONENTS,
    MUTANTS,
    MUTANTS_BY_NAME,
    SPEC_DECODE_MUTANTS,
    Mutant,
    get_mutant,
    known_names,
)
from schedcheck.engines.reference.mutants.hashed import PARTS as HASHED_PARTS
from schedcheck.engines.reference.mutants.parts import CLEAN, EngineParts
from schedcheck.engines.reference.mutants.radix import PARTS as RADIX_PARTS
from schedcheck.engines.reference.mutants.runner import RUNNER_MUTANTS, apply_runner_mutant
from schedcheck.engines.reference.mutants.scheduler import PARTS as SCHEDULER_PARTS

ENGINE_MUTANTS: dict[str, EngineParts] = {**SCHEDULER_PARTS, **HASHED_PARTS, **RADIX_PARTS}

__all__ = [
    "COMPONENTS",
    "ENGINE_MUTANTS",
    "MUTANTS",
    "MUTANTS_BY_NAME",
    "RUNNER_MUTANTS",
    "SPEC_DECODE_MUTANTS",
    "EngineParts",
    "Mutant",
    "apply_runner_mutant",
    "engine_parts",
    "get_mutant",
    "known_names",
]


def engine_parts(mutant: str | None, block_manager: str) -> EngineParts:
    """The classes to build an engine with `mutant` from (the clean ones for None or a
    runner mutant); ValueError for an unknown name or a mutant of the other block manager."""
    if mutant is None:
        return CLEAN
    entry = get_mutant(mutant)
    if entry.component in ("hashed", "radix") and entry.component != block_manager:
        raise ValueError(
            f"mutant {mutant!r} lives in the {entry.component!r} block manager; "
            f"run it with block_manager={entry.component!r}, not {block_manager!r}"
        )
    return ENGINE_MUTANTS.get(mutant, CLEAN)
