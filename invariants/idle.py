"""Idle memory: once the engine runs nothing, the pool holds nothing for anybody.

Checked at the end of every run and whenever the engine goes idle between arrivals:

- no block is referenced (block-pool.leak): every ref_cnt is 0, the blocks the snapshot
  reserves by design excepted (vLLM's null block, SGLang's padding page and tree slots);
- the engine's own idle statement holds (block-pool.idle-leak), where its snapshot makes
  one through the optional `idle_problems()`: SGLang's `available + evictable == total`
  and nothing protected in its radix tree. A lock that an aborted request never released
  hides there: its slots are the tree's (reserved), so no ref_cnt shows it, and with a
  roomy pool it never shows as liveness either (sglang#1858's class).
"""

from __future__ import annotations

from schedcheck.engines.protocol import KVSnapshot
from schedcheck.invariants.block_pool import check_no_leak
from schedcheck.invariants.violation import Violation


def check_idle(step: int, snapshot: KVSnapshot) -> list[Violation]:
    """The violations of an idle pool (none when every request is done and nothing is held)."""
    out = check_no_leak(step, snapshot)
    problems = getattr(snapshot, "idle_problems", None)
    if problems is None:
        return out
    return out + [Violation("block-pool.idle-leak", step, p) for p in problems()[:1]]
