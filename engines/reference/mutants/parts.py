"""The classes an engine is built from: the clean ones, or a mutant's subclasses."""

from __future__ import annotations

from dataclasses import dataclass

from schedcheck.engines.reference.block_hash import BlockHasher
from schedcheck.engines.reference.hashed_manager import HashedKVManager
from schedcheck.engines.reference.radix_manager import RadixKVManager
from schedcheck.engines.reference.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class EngineParts:
    """What `ReferenceEngine` instantiates; every field defaults to the clean class."""

    scheduler: type[Scheduler] = Scheduler
    hashed: type[HashedKVManager] = HashedKVManager
    radix: type[RadixKVManager] = RadixKVManager
    hasher: type[BlockHasher] = BlockHasher


CLEAN = EngineParts()
