#!/usr/bin/env python3
"""F9 (schedcheck fuzz, sglang 0.5.23): an abort of a chunked prefill is dropped when a
retracting pause (`pause_generation(mode="retract")`, an RL trainer's weight update) comes
before the next scheduling step: the aborted request goes back to the waiting queue,
SGLang admits it again and prefills its whole prompt once more before it finishes it.

Standalone: imports only SGLang (and torch). Run with the CPU torch:

    python tests/sglang/repro/f9_chunked_abort_lost_across_a_retracting_pause.py

sglang 0.5.23, srt/managers/scheduler.py:
- `abort_request` (5675-5678): the request being chunked is not torn down at once; it is
  recorded in `_pending_chunked_abort_req`, for the next `get_next_batch_to_run`
  (3897: `process_pending_chunked_abort`);
- `pause_generation(mode="retract")` (5817-5919) retracts every running request *and*
  the chunked one (`retract_all`: its KV row is released), puts them back in the waiting
  queue (`_add_request_to_queue`, 5910) and sets `chunked_req = None` (5919);
- `process_pending_chunked_abort` (3778-3803) then finds `chunked_req is not req` and,
  since the request holds no KV (`not req.kv.holds_kv`: the retraction released it),
  drops the marker ("Already past chunked prefill; the running-batch abort path handles
  it") without looking for it where it is: in the waiting queue, where abort method 1
  (pop it, 5685-5697) would end it at no cost.
So the request stays queued, is admitted again and prefilled from its cached prefix to the
end of its prompt (only the `to_finish` that abort method 3 set while it was in the last
batch ends it then). schedcheck's SGLang campaigns (overlap scheduling, where the pause
waits for the batch in flight, so the abort lands between them) met it as a run that kept
prefilling an aborted request: tests/sglang/test_sglang_mixed.py drives the whole
sequence through SGLang's own scheduler.

Below: SGLang's own `process_pending_chunked_abort`, on the state the two calls above
leave (the request re-queued with no KV, `chunked_req` None, the marker set).
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

from types import SimpleNamespace  # noqa: E402

from sglang.srt.runtime_context import SpawnRanks, publish, reset_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402


def after_abort_then_pause() -> tuple[object, list[object], object]:
    """(the marker, the waiting queue, the request) once SGLang's next scheduling step
    has run `process_pending_chunked_abort` on what abort + retracting pause left."""
    reset_context()
    args = ServerArgs(model_path="dummy", device="cpu", disable_overlap_schedule=True)
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=3)
    params.normalize(None)
    req = Req("r0", "", array("q", range(10, 30)), params, vocab_size=1 << 20)
    assert not req.kv.holds_kv and not req.finished()  # as retract_all leaves it
    scheduler = SimpleNamespace(
        chunked_req=None,  # pause_generation: self.chunked_req = None (5919)
        _pending_chunked_abort_req=req,  # abort_request (5678)
        waiting_queue=[req],  # pause_generation: _add_request_to_queue (5910)
    )
    Scheduler.process_pending_chunked_abort(scheduler)
    return scheduler._pending_chunked_abort_req, scheduler.waiting_queue, req


if __name__ == "__main__":
    marker, waiting, req = after_abort_then_pause()
    print(f"after process_pending_chunked_abort: marker {marker!r}, waiting queue "
          f"{[r.rid for r in waiting]}, finished {req.finished()}")  # fmt: skip
    assert marker is None and waiting == [req] and not req.finished()
    print("F9 reproduced: the aborted chunked request is still queued, its abort dropped")
