"""SGLang 0.5.23 (tox -e sglang): the pool checked incrementally, from the watched
allocator (engines/sglang/changes.py), not swept whole every step.

A clean run sweeps twice (its first check and the end) and gets the fingerprint and
verdict of a run swept every step. Each planted pool bug (a double free, a slot handed out
and never used, a slot freed while a live row holds it), planted after a step's update, is
found at that step with the words of the run swept every step; so is one planted where
the allocator is not watched (a page taken off the free list by hand).
"""

from __future__ import annotations

import pytest
from sglang_driver import SGLANG_0_5_23, config

from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces.schema import TraceRequest

pytestmark = SGLANG_0_5_23
PLANT_STEP = 6


def _trace() -> list[TraceRequest]:
    """Requests sharing a 12-token prefix, arriving over a few steps, with decodes."""
    prefix = tuple(range(200, 212))
    return [
        TraceRequest(f"r{i}", 0.004 * i, 6, prompt_token_ids=(*prefix, *range(10 * i, 10 * i + 5)))
        for i in range(8)
    ]


def _run(block_size: int, every_step: bool, plant=None):
    from schedcheck.engines.sglang.adapter import SglangEngine

    cfg = config(block_size=block_size, num_gpu_blocks=256 // block_size, max_model_len=64)
    options = SimOptions(pool_check_interval_steps=1 if every_step else 0)
    sim = Simulation(_trace(), "sglang", cfg, options, profile("unit"))
    assert isinstance(sim.engine, SglangEngine)
    if plant is not None:
        update = sim.engine.update_from_output

        def planted(output, sampled):
            finished = update(output, sampled)
            if output.step == PLANT_STEP:
                plant(sim.engine)
            return finished

        sim.engine.update_from_output = planted
    return sim, sim.run()


@pytest.mark.parametrize("block_size", [1, 4])
def test_a_clean_run_is_checked_incrementally_with_the_verdict_of_a_full_sweep(block_size):
    sim, result = _run(block_size, every_step=False)
    swept, swept_result = _run(block_size, every_step=True)
    assert result.violations == [] and swept_result.violations == []
    assert result.fingerprint == swept_result.fingerprint and result.finished == 8
    assert (sim.pool.num_sweeps, sim.pool.num_unconfirmed) == (2, 0)
    assert swept.pool.num_sweeps == result.steps + 1


def _double_free(engine) -> None:
    import torch

    allocator = engine.scheduler.token_to_kv_pool_allocator
    page = engine.config.block_size
    free_slot = int(allocator.free_pages[-1]) * page
    allocator.free(torch.tensor([free_slot], dtype=torch.int64))


def _never_used(engine) -> None:
    engine.scheduler.token_to_kv_pool_allocator.alloc(engine.config.block_size)


def _freed_while_held(engine) -> None:
    import torch

    table = next(iter(engine.kv_snapshot().block_table_views().values()))
    engine.scheduler.token_to_kv_pool_allocator.free(torch.tensor(table[:1], dtype=torch.int64))


def _taken_by_hand(engine) -> None:
    allocator = engine.scheduler.token_to_kv_pool_allocator
    allocator.free_pages = allocator.free_pages[1:]  # not through a watched entry point


PLANTS = {
    "double free": (_double_free, "block-pool.free-queue"),
    "handed out, never used": (_never_used, "block-pool.leak"),
    "freed while a live row holds it": (_freed_while_held, "block-pool.free-queue"),
    "taken off the free list by hand": (_taken_by_hand, "block-pool.leak"),
}


@pytest.mark.parametrize("block_size", [1, 4])
@pytest.mark.parametrize("name", list(PLANTS))
def test_a_planted_pool_bug_is_found_at_its_step_as_the_full_sweep_words_it(name, block_size):
    plant, invariant = PLANTS[name]
    sim, result = _run(block_size, every_step=False, plant=plant)
    _, swept = _run(block_size, every_step=True, plant=plant)
    words = [(v.invariant, v.step, v.message) for v in result.violations[:1]]
    assert words == [(v.invariant, v.step, v.message) for v in swept.violations[:1]]
    assert words[0][:2] == (invariant, PLANT_STEP), words
    assert sim.pool.num_sweeps == 2  # the first check, and the one that words the finding


@pytest.mark.parametrize("block_size", [1, 4])
def test_the_log_names_what_its_entry_points_moved_and_resyncs_after_a_move_by_hand(block_size):
    """Through the wrapped entry points the mask follows SGLang's free lists slot for slot;
    a page taken off by hand makes the counts differ: the next take answers None (sweep)
    and the mask is SGLang's lists again, so the take after it names nothing."""
    import numpy as np

    from schedcheck.engines.sglang.build import build_pools
    from schedcheck.engines.sglang.changes import AllocatorLog
    from schedcheck.engines.sglang.snapshot import free_slots

    cfg = config(block_size=block_size, num_gpu_blocks=64 // block_size)
    _, allocator = build_pools(cfg)
    log = AllocatorLog(allocator, 64, block_size)
    real = lambda: free_slots(allocator, block_size)  # noqa: E731

    def mask_is_sglangs() -> bool:
        expected = np.zeros(64, bool)
        expected[real()] = True
        return bool((log.free == expected).all()) and log.num_free == allocator.available_size()

    assert log.take_changed(real) is None and mask_is_sglangs()  # the first take: a sweep
    assert log.take_changed(real).tolist() == []
    taken = allocator.alloc(2 * block_size)
    allocator.free(taken[block_size:])  # the second page back
    changed = sorted(set(log.take_changed(real).tolist()))
    assert changed == list(range(block_size, 3 * block_size)) and mask_is_sglangs()
    allocator.free_pages = allocator.free_pages[1:]  # by hand
    assert log.take_changed(real) is None and mask_is_sglangs()
    assert log.take_changed(real).tolist() == []
