#!/usr/bin/env python3
"""S3 (schedcheck fuzz, sglang 0.5.23): with --disable-radix-cache and
--enable-streaming-session, an ignore_eos later turn whose input is chunked fails
`assert req.prefix_len == 0` in `PrefillAdder.add_one_req_ignore_eos`, killing the scheduler.

Standalone: imports only SGLang (and torch). Run with the CPU torch:

    python tests/sglang/repro/s3_ignore_eos_later_turn_of_a_session_chunked_radix_off.py

`PrefillAdder.add_one_req` sends an ignore_eos request to `add_one_req_ignore_eos` when the
tree is disabled (srt/managers/schedule_policy.py), which assumes a disabled tree gives no
prefix: where the request's input is longer than what is left of the chunk
(`rem_chunk_tokens`), it asserts `req.prefix_len == 0` before chunking. A streaming
session's later turn has a prefix without the tree: the session's own KV record
(`StreamingSession.try_match_prefix`, 2 tokens here: the first turn's prompt and output).
Without ignore_eos, `_select_prefill_admission` chunks the same turn.

The state below is what a session's finished first turn leaves (`try_cache_finished_req`:
the record, row and committed length kept in the session's slot, the turn recorded by
`Session.finish_req`); the later turn is built by SGLang's own `Session.create_req`, then
matched (`init_next_round_input`) and offered to a PrefillAdder with a 4-token chunk, as
`Scheduler._get_new_batch_prefill_raw` does.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import traceback
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
CHUNK = 4
FIRST_PROMPT, FIRST_OUTPUTS = (6000,), (7,)
LATER_INPUT = tuple(range(7000, 7008))  # 8 tokens: more than a chunk


def admit_later_turn(ignore_eos: bool) -> int:
    """Offer a streaming session's later turn to an idle server's first prefill batch
    (radix cache off, chunked prefill 4); the tokens of it the batch takes."""
    args = ServerArgs(
        model_path="dummy", device="cpu", page_size=PAGE, disable_radix_cache=True,
        chunked_prefill_size=CHUNK, max_prefill_tokens=CHUNK, enable_streaming_session=True,
        disable_overlap_schedule=True,
    )  # fmt: skip
    reset_context()
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    from sglang.srt.managers.io_struct import (
        OpenSessionReqInput,
        SessionParams,
        TokenizedGenerateReqInput,
    )
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, ReqKvInfo, ScheduleBatch
    from sglang.srt.managers.schedule_policy import PrefillAdder
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.session.session_controller import SessionController
    from sglang.srt.session.streaming_session import SessionSlot

    pool = ReqToTokenPool(size=4, max_context_len=32, device="cpu", enable_memory_saver=False)
    allocator = PagedTokenToKVPoolAllocator(
        64, PAGE, dtype=torch.float16, device="cpu", kvcache=None, need_sort=False
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
    sessions = SessionController(tree)
    sessions.open(OpenSessionReqInput(capacity_of_str_len=1 << 20, session_id="s", streaming=True))
    session = sessions.get("s")

    def turn(rid: str, tokens: tuple[int, ...]):
        params = SamplingParams(max_new_tokens=1, ignore_eos=ignore_eos)
        params.normalize(None)
        recv = TokenizedGenerateReqInput(
            rid=rid, input_text="", input_ids=array("q", tokens), input_embeds=None,
            mm_inputs=None, token_type_ids=None, sampling_params=params, return_logprob=False,
            logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False,
            session_params=SessionParams(id="s"),
        )  # fmt: skip
        return session.create_req(recv, None, 1 << 20)

    # the first turn ran and finished: its KV (prompt + output) kept in the session's slot
    first = turn("t0", FIRST_PROMPT)
    first.output_ids = list(FIRST_OUTPUTS)
    first.finished_reason = FINISH_LENGTH(length=len(FIRST_OUTPUTS))
    num_kept = len(FIRST_PROMPT) + len(FIRST_OUTPUTS)
    [row] = pool.alloc_rows(1)
    pool.write((row, slice(0, num_kept)), allocator.alloc(PAGE)[:num_kept])
    tree.session.slots["s"] = SessionSlot(
        kv=ReqKvInfo(req_pool_idx=row, kv_committed_len=num_kept, kv_allocated_len=num_kept)
    )
    session.finish_req(first)

    later = turn("t1", LATER_INPUT)  # history + input: 10 tokens
    later.init_next_round_input(tree)  # its prefix: the session's record
    print(f"ignore_eos={ignore_eos}: the later turn's prefix is {later.prefix_len} tokens")
    adder = PrefillAdder(PAGE, tree, allocator, ScheduleBatch(reqs=[]), 0.7, CHUNK, CHUNK)
    adder.add_one_req(later, has_chunked_req=False, truncation_align_size=None)
    return sum(r.extend_len for r in adder.can_run_list)


if __name__ == "__main__":
    print(f"without ignore_eos: the batch takes {admit_later_turn(ignore_eos=False)} tokens")
    try:
        taken = admit_later_turn(ignore_eos=True)
    except AssertionError as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        print(f"with ignore_eos: AssertionError at {frame.name}: {frame.line}")
        assert frame.name == "add_one_req_ignore_eos" and "prefix_len == 0" in frame.line
        print("S3 reproduced: the ignore_eos path cannot chunk a session's later turn")
    else:
        raise SystemExit(f"not reproduced: the ignore_eos batch took {taken} tokens")
