"""The simulator's engine-level fault points (sim/faults.py) through SGLang's own hooks.

- preempt: SGLang's retraction test hook (`SGLANG_TEST_RETRACT`: the module constants
  `TEST_RETRACT`, `TEST_RETRACT_INTERVAL` of `managers/scheduler.py`), switched on for the
  scheduling calls until one runs a decode step: `update_running_batch` then calls
  `retract_decode` as under memory pressure (it keeps at least one request); or, while a
  prefill is between two chunks, half the time (drawn), a pause for a weight update:
  `pause_generation(mode="retract")` then `continue_generation`, which retracts every
  running request *and* the chunked one (an RL trainer's pause between rollouts);
- evict: `tree_cache.evict(EvictParams(num_tokens=n))`, n drawn (pages of the tree that no
  request locks, least recently used first);
- reduced-budget: not applied (SGLang's budget is the PrefillAdder's, built per step).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from schedcheck.engines.sglang import stubs

stubs.install()

import sglang.srt.managers.scheduler as sglang_scheduler  # noqa: E402
from sglang.srt.managers.io_struct import (  # noqa: E402
    ContinueGenerationReqInput,
    PauseGenerationReqInput,
)
from sglang.srt.mem_cache.base_prefix_cache import EvictParams  # noqa: E402

NO_PREFILL_LIMIT = 1 << 30  # TEST_RETRACT also skips prefill above this running batch size


@contextlib.contextmanager
def forced_retraction(on: bool) -> Iterator[None]:
    """SGLANG_TEST_RETRACT with interval 1 for the calls inside, when `on`."""
    if not on:
        yield
        return
    names = ("TEST_RETRACT", "TEST_RETRACT_INTERVAL", "TEST_RETRACT_NO_PREFILL_BS")
    saved = {n: getattr(sglang_scheduler, n) for n in names}
    values = dict(zip(names, (True, 1, NO_PREFILL_LIMIT), strict=True))
    for n, v in values.items():
        setattr(sglang_scheduler, n, v)
    try:
        yield
    finally:
        for n, v in saved.items():
            setattr(sglang_scheduler, n, v)


def evict(tree_cache: Any, page_size: int, rng: np.random.Generator) -> str | None:
    before = tree_cache.evictable_size()
    tree_cache.evict(EvictParams(num_tokens=int(rng.integers(1, 65)) * page_size))
    evicted = before - tree_cache.evictable_size()
    return f"evicted {evicted} cached slots" if evicted else None


def pause_and_retract(scheduler: Any) -> str:
    """SGLang's pause for a weight update, retracting: every running request and the
    chunked prefill back to the waiting queue, their KV released; then generation goes on
    (`continue_generation`, no CUDA cache to empty)."""
    chunked = scheduler.chunked_req
    scheduler.pause_generation(PauseGenerationReqInput(mode="retract"))
    scheduler.continue_generation(ContinueGenerationReqInput(torch_empty_cache=False))
    what = (
        "a chunked prefill" if chunked is None else f"a chunked prefill in flight ({chunked.rid})"
    )
    return f"pause_generation(retract) with {what}"
