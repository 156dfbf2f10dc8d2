#!/usr/bin/env python3
"""F1 (schedcheck fuzz, sglang 0.5.23): with the radix cache off, a request with ignore_eos
whose prompt + max_new_tokens is exactly what SGLang's own frontend grants for the KV pool
is never admitted, on an idle server: a hang.

Standalone: imports only SGLang (and torch). Run with the CPU torch:

    python tests/sglang/repro/f1_ignore_eos_admission_at_memory_cap.py

The two sides that disagree:
- `BaseTokenToKVPoolAllocator.max_new_tokens_for_memory` (called by
  `Scheduler.init_req_max_new_tokens` when the request arrives) grants
  max_new_tokens <= capacity - paged_input - page_size - 1;
- `PrefillAdder.add_one_req_ignore_eos` (radix cache disabled + ignore_eos) admits only if
  cur_rem_tokens - (paged_input + per_req_token_overhead) - max_new_tokens
  > IGNORE_EOS_RESERVE_TOKENS (1), i.e. prompt + max_new_tokens < capacity - page - 1,
  strictly: a request at the frontend's cap is refused with NO_TOKEN forever.

A pool of 4 slots (page 1), a 1-token prompt: the frontend grants 1 new token
(4 - 1 - 1 - 1 = 1), the adder refuses it with nothing running; a 5-slot pool grants 2 and
refuses 2 too, but admits 1 (one below the cap). A request that asks for no limit
(max_new_tokens None) is capped to exactly the frontend's value, so it hangs whenever the
KV pool, not max_req_len, binds.
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


def admit(pool_slots: int, below_cap: int = 0) -> tuple[int, str]:
    """(max_new_tokens the frontend grants, the adder's answer for a request asking that
    many minus `below_cap`) on an idle server."""
    args = ServerArgs(
        model_path="dummy", device="cpu", page_size=1, disable_radix_cache=True,
        chunked_prefill_size=8, disable_overlap_schedule=True,
    )  # fmt: skip
    reset_context()
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import PrefillAdder
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams

    pool = ReqToTokenPool(size=4, max_context_len=64, device="cpu", enable_memory_saver=False)
    allocator = TokenToKVPoolAllocator(
        pool_slots, dtype=torch.float16, device="cpu", kvcache=None, need_sort=False
    )
    tree = UnifiedRadixCache(
        CacheInitParams(
            disable=True,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            page_size=1,
            tree_components=(ComponentType.FULL,),
        )
    )  # fmt: skip  (what mem_cache.registry.create_unified_radix_cache builds)
    granted = allocator.max_new_tokens_for_memory(
        1, 1 << 30, token_capacity=pool_slots, sliding_window_size=None, chunk_size=8
    )
    params = SamplingParams(max_new_tokens=granted - below_cap, ignore_eos=True)
    params.normalize(None)
    req = Req("r0", "", array("q", [1000]), params, vocab_size=1 << 20)
    adder = PrefillAdder(1, tree, allocator, ScheduleBatch(reqs=[]), 0.7, 8, 8)
    req.init_next_round_input(tree)
    return granted, str(adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None))


if __name__ == "__main__":
    for slots, below in ((4, 0), (5, 0), (5, 1)):
        granted, answer = admit(slots, below)
        print(
            f"pool {slots} slots: frontend grants max_new_tokens={granted}; "
            f"adder for max_new_tokens={granted - below}: {answer}"
        )
    assert admit(4) == (1, "AddReqResult.NO_TOKEN")
    assert admit(5, 1) == (2, "AddReqResult.CONTINUE")
    print("F1 reproduced: an idle server refuses a request its frontend accepted")
