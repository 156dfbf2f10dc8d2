#!/usr/bin/env python3
"""F8 (schedcheck fuzz, sglang 0.5.23): with the radix cache and chunked prefill off, a
prefill batch of ignore_eos requests runs more input tokens than --max-prefill-tokens, and
more than the documented "real bound" (the maximum of that value and the model's context
length): 4 + 1 + 12 = 17 input tokens with max_prefill_tokens 16 and context length 16.

Standalone: imports only SGLang (and torch). Run with the CPU torch:

    python tests/sglang/repro/f8_ignore_eos_prefill_batch_over_max_prefill_tokens.py

SGLang has two admission paths in `PrefillAdder.add_one_req` (sglang 0.5.23,
srt/managers/schedule_policy.py):
- `ignore_eos` and a disabled tree go to `add_one_req_ignore_eos` (1401-1402). It checks
  memory only (`can_allocate_prefill`, 1250-1257) and, with chunked prefill off
  (`rem_chunk_tokens is None`, 1328), admits the whole request (1342-1351): it never
  compares the request's input with `rem_input_tokens` (what is left of
  max_prefill_tokens). Only `budget_state()` (883-884), after the request is charged
  (page-ceiled, `_update_prefill_budget` 917, 938), stops the batch once
  `rem_input_tokens <= 0`, so the request that crosses the cap is admitted whole.
- every other request goes to `_select_prefill_admission`, which refuses it (1627-1633):
  "Without chunking, allow the first request even above the input cap":
  `rem_chunk_tokens is None and can_run_list and input_tokens >= rem_input_tokens`
  -> AddReqResult.OTHER.
The documented bound (`--max-prefill-tokens`, srt/arg_groups/fields/schedule.py:71-77):
"The maximum number of tokens in a prefill batch. The real bound will be the maximum of
this value and the model's maximum context length".

So the same three requests make a 5-token batch without ignore_eos and a 17-token batch
with it (page 4: rem_input_tokens 16 -> 12 -> 8 -> -4, charged page-ceiled 4 + 4 + 12).
The scheduler's loop (`Scheduler._get_new_batch_prefill_raw`, srt/managers/scheduler.py
4156-4270) is reproduced below: stop when `budget_state()` is OTHER before a candidate,
else `init_next_round_input` and `add_one_req`, and stop at the first answer other than
CONTINUE.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from array import array
from unittest.mock import MagicMock


class _StubLoader(importlib.abc.Loader):  # as sglang.test.test_utils.maybe_stub_sgl_kernel
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = lambda name: MagicMock()


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in ("sgl_kernel", "torchvision"):
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


sys.meta_path.insert(0, _StubFinder())  # GPU-only imports on the text path; never called

import torch  # noqa: E402
from sglang.srt.runtime_context import SpawnRanks, publish, reset_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

PAGE = 4
MAX_PREFILL_TOKENS = 16
CONTEXT_LENGTH = 16
PROMPTS = ((1000, 1001, 1002, 1003), (2000,), tuple(range(3000, 3012)))  # 4, 1, 12 tokens


def prefill_batch(ignore_eos: bool) -> list[int]:
    """The input lengths of the first prefill batch an idle server builds from PROMPTS
    (fcfs, radix cache off, chunked prefill off, 40 KV slots)."""
    args = ServerArgs(
        model_path="dummy", device="cpu", page_size=PAGE, disable_radix_cache=True,
        chunked_prefill_size=-1, max_prefill_tokens=MAX_PREFILL_TOKENS,
        context_length=CONTEXT_LENGTH, disable_overlap_schedule=True,
    )  # fmt: skip
    reset_context()
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams

    pool = ReqToTokenPool(size=4, max_context_len=32, device="cpu", enable_memory_saver=False)
    allocator = PagedTokenToKVPoolAllocator(
        40, PAGE, dtype=torch.float16, device="cpu", kvcache=None, need_sort=False
    )
    tree = UnifiedRadixCache(
        CacheInitParams(
            disable=True,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            page_size=PAGE,
            tree_components=(ComponentType.FULL,),
        )
    )  # fmt: skip  (what mem_cache.registry.create_unified_radix_cache builds)
    waiting = []
    for i, prompt in enumerate(PROMPTS):
        params = SamplingParams(max_new_tokens=1, ignore_eos=ignore_eos)
        params.normalize(None)
        waiting.append(Req(f"r{i}", "", array("q", prompt), params, vocab_size=1 << 20))
    # Scheduler._get_new_batch_prefill_raw: PrefillAdder(page_size, tree_cache, allocator,
    # running_batch, new_token_ratio, max_prefill_tokens, chunked_prefill_size (None: off))
    adder = PrefillAdder(
        PAGE, tree, allocator, ScheduleBatch(reqs=[]), 0.7, MAX_PREFILL_TOKENS, None
    )
    for req in waiting:
        if adder.budget_state() == AddReqResult.OTHER:
            break
        req.init_next_round_input(tree)
        if adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None) != (
            AddReqResult.CONTINUE
        ):
            break
    return [r.extend_len for r in adder.can_run_list]


if __name__ == "__main__":
    plain, ignoring = prefill_batch(ignore_eos=False), prefill_batch(ignore_eos=True)
    print(f"max_prefill_tokens {MAX_PREFILL_TOKENS}, context length {CONTEXT_LENGTH}, page {PAGE}")
    print(f"without ignore_eos: prefill batch {plain} = {sum(plain)} input tokens")
    print(f"with ignore_eos:    prefill batch {ignoring} = {sum(ignoring)} input tokens")
    assert plain == [4, 1], plain
    assert ignoring == [4, 1, 12], ignoring
    assert sum(ignoring) > max(MAX_PREFILL_TOKENS, CONTEXT_LENGTH)
    print("F8 reproduced: the ignore_eos path runs a prefill batch over max_prefill_tokens")
