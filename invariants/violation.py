"""A violation: which property broke, where, and what was expected and found."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken property at one step.

    `position` is an index into the request's tokens, `slot` a KV slot
    (`block_id * block_size + offset`), `block` a physical block id; -1 where not applicable.
    """

    invariant: str  # e.g. "shadow-kv.read", "accounting.budget", "block-pool.ref-cnt"
    step: int
    message: str
    request_id: str = ""
    position: int = -1
    slot: int = -1
    block: int = -1
    expected: str = ""
    found: str = ""
    sim_time_s: float = 0.0
    context: tuple[str, ...] = field(default=())  # the last few steps of that request
    # The sub-case that makes this violation one bug among the invariant's (signature.py):
    # for a crash, the exception and the frame that raised it; for a shadow-KV read, what
    # was read instead and how the request got there. "" where the invariant says it all.
    case: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["context"] = list(self.context)
        if not self.case:  # absent when empty: bundles recorded before it keep their bytes
            del out["case"]
        return out

    @property
    def signature(self) -> str:
        """The bug this violation is, as a campaign counts findings: `invariant[case]`."""
        return f"{self.invariant}[{self.case}]" if self.case else self.invariant

    def headline(self) -> str:
        where = f" request {self.request_id}" if self.request_id else ""
        if self.position >= 0:
            where += f" position {self.position}"
        if self.slot >= 0:
            where += f" slot {self.slot}"
        if self.block >= 0:
            where += f" block {self.block}"
        return f"step {self.step}: {self.invariant}:{where}: {self.message}"
