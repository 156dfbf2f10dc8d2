"""SGLang 0.5.23 (tox -e sglang): what the shadow KV and the pool checks must not get wrong.

- An aborted request's discarded step may write a slot that a live request verified once,
  when SGLang's dedup has since moved that request's row onto the tree's copy and freed the
  slot: a legal write (it was reported as write-into-shared-block, a false positive).
- The radix tree's evictions are counted (coverage's evict-cached-block read 0 in every
  SGLang campaign while the tree evicted thousands of times).
- SGLang's idle statement is checked: with nothing running, available + evictable == total.
"""

from __future__ import annotations

from sglang_driver import SGLANG_0_5_23, config

from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

pytestmark = SGLANG_0_5_23


def test_an_aborted_requests_discarded_write_into_a_slot_dedup_freed_is_clean():
    """e is aborted mid-decode; c and d share a 5-token prompt in one step, and SGLang's
    checkpoint dedups d's fresh prefill onto the tree's copy, freeing d's slots; e's extra
    decode takes one of them (slot 16). Before the fix: exit 1, `the discarded step of
    aborted e writes slot 16, which holds KV a live request verified`."""
    trace = [
        TraceRequest("e", 0.0, 5, prompt_token_ids=(1, 2, 3, 4), abort_time_s=0.015),
        TraceRequest("c", 0.005, 3, prompt_token_ids=(5, 5, 5, 5, 5)),
        TraceRequest("d", 0.005, 3, prompt_token_ids=(5, 5, 5, 5, 5)),
    ]
    cfg = config(block_size=4, num_gpu_blocks=20, max_num_batched_tokens=32, max_model_len=64)
    result = run(trace, "sglang", cfg, SimOptions(), profile("unit"))
    assert result.violations == [] and result.exit_code == 0
    assert (result.finished, result.aborted) == (2, 1)


def test_the_radix_trees_evictions_are_counted():
    """Twelve distinct 12-token prompts through a 64-slot pool: the tree must evict cached
    prefixes to admit the later ones, and coverage counts the slots it evicted."""
    trace = [
        TraceRequest(f"r{i}", 0.01 * i, 2, prompt_token_ids=tuple(range(100 * i, 100 * i + 12)))
        for i in range(12)
    ]
    cfg = config(block_size=1, num_gpu_blocks=64, max_num_batched_tokens=16, max_model_len=48)
    result = run(trace, "sglang", cfg, SimOptions(), profile("unit"))
    assert result.violations == []
    assert result.coverage["evict-cached-block"] > 0
