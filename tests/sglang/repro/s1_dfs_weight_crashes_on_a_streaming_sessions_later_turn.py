#!/usr/bin/env python3
"""S1 (schedcheck fuzz, sglang 0.5.23): with --schedule-policy dfs-weight and
--enable-streaming-session, a streaming session's later turn waiting to be scheduled
crashes the scheduler: TypeError: '_VirtualNode' object cannot be interpreted as an integer.

Standalone: imports only SGLang (and torch). Run with the CPU torch:

    python tests/sglang/repro/s1_dfs_weight_crashes_on_a_streaming_sessions_later_turn.py

A streaming session keeps its KV between turns in a slot of the tree cache
(srt/session/streaming_session.py), whose stand-in tree node is a `_VirtualNode` ("lock
target for session-owned KV"). A later turn's prefix match against the session
(`StreamingSession.try_match_prefix`) returns that stand-in as `last_device_node`, which
`match_kv_cache` stores as the request's `last_node`. `SchedulePolicy.calc_priority`
computes the waiting queue's prefix matches for every cache-aware policy; dfs-weight then
sorts the queue by `tree_cache.dfs_weight_order([req.last_node for req in waiting_queue])`
(srt/managers/schedule_policy.py, `_sort_by_dfs_weight`), whose Rust binding takes node
ids: the stand-in is not one. lpm reads only prefix lengths and schedules the same turn.

The state below is what a session's finished first turn leaves (`try_cache_finished_req`:
the record, row and committed length kept in the session's slot, the turn recorded by
`Session.finish_req`); the later turn is built by SGLang's own `Session.create_req`.
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

PAGE = 1
FIRST_PROMPT, FIRST_OUTPUTS, LATER_INPUT = (100, 101, 102, 103), (7, 8), (300, 301)


def waiting_queue_sorted(policy: str) -> list[str]:
    """Sort a waiting queue holding a streaming session's later turn under `policy`."""
    args = ServerArgs(
        model_path="dummy", device="cpu", page_size=PAGE, schedule_policy=policy,
        enable_streaming_session=True, disable_overlap_schedule=True,
    )  # fmt: skip
    reset_context()
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    from sglang.srt.managers.io_struct import (
        OpenSessionReqInput,
        SessionParams,
        TokenizedGenerateReqInput,
    )
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req, ReqKvInfo
    from sglang.srt.managers.schedule_policy import SchedulePolicy
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.session.session_controller import SessionController
    from sglang.srt.session.streaming_session import SessionSlot

    pool = ReqToTokenPool(size=4, max_context_len=32, device="cpu", enable_memory_saver=False)
    allocator = TokenToKVPoolAllocator(64, dtype=torch.float16, device="cpu", kvcache=None,
                                       need_sort=False)  # fmt: skip
    tree = UnifiedRadixCache(
        CacheInitParams(
            disable=False,
            req_to_token_pool=pool,
            token_to_kv_pool_allocator=allocator,
            page_size=PAGE,
            tree_components=(ComponentType.FULL,),
        )
    )  # fmt: skip  (what mem_cache.registry.create_unified_radix_cache builds)
    sessions = SessionController(tree)
    sessions.open(OpenSessionReqInput(capacity_of_str_len=1 << 20, session_id="s", streaming=True))
    session = sessions.get("s")

    def turn(rid: str, tokens: tuple[int, ...]) -> Req:
        params = SamplingParams(max_new_tokens=len(FIRST_OUTPUTS), ignore_eos=True)
        params.normalize(None)
        recv = TokenizedGenerateReqInput(
            rid=rid, input_text="", input_ids=array("q", tokens), input_embeds=None,
            mm_inputs=None, token_type_ids=None, sampling_params=params, return_logprob=False,
            logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False,
            session_params=SessionParams(id="s"),
        )  # fmt: skip
        return session.create_req(recv, None, 1 << 20)

    # the first turn ran and finished: its KV (prompt + outputs) kept in the session's slot
    first = turn("t0", FIRST_PROMPT)
    first.output_ids = list(FIRST_OUTPUTS)
    first.finished_reason = FINISH_LENGTH(length=len(FIRST_OUTPUTS))
    num_kept = len(FIRST_PROMPT) + len(FIRST_OUTPUTS)
    [row] = pool.alloc_rows(1)
    pool.write((row, slice(0, num_kept)), allocator.alloc(num_kept))
    tree.session.slots["s"] = SessionSlot(
        kv=ReqKvInfo(req_pool_idx=row, kv_committed_len=num_kept, kv_allocated_len=num_kept)
    )
    session.finish_req(first)

    later = turn("t1", LATER_INPUT)  # the session's next input: its history + the input
    assert list(later.origin_input_ids) == [*FIRST_PROMPT, *FIRST_OUTPUTS, *LATER_INPUT]
    other = Req("x", "", array("q", (500, 501)), SamplingParams(max_new_tokens=1),
                vocab_size=1 << 20)  # fmt: skip
    waiting = [other, later]
    policy_of = SchedulePolicy(policy, tree, False, False, False)
    policy_of.calc_priority(waiting)  # Scheduler.get_new_batch_prefill's first call
    return [r.rid for r in waiting]


if __name__ == "__main__":
    print("lpm:", waiting_queue_sorted("lpm"))  # the later turn's cached prefix: first
    try:
        order = waiting_queue_sorted("dfs-weight")
    except TypeError as exc:
        print(f"dfs-weight: TypeError: {exc}")
        assert "_VirtualNode" in str(exc), exc
        print("S1 reproduced: dfs-weight cannot sort a streaming session's later turn")
    else:
        raise SystemExit(f"not reproduced: dfs-weight sorted the queue {order}")
