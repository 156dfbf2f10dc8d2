"""The SGLang snapshot's point lookup of row holders (`ref_cnt_of`, the incremental pool
check's ref_cnt), on stand-in rows: it equals the full count (`ref_cnt()`) at every id
asked about, repeats and ids outside the pool included, on page sizes 1 and 4 (a row holds
the rest of its last page). No SGLang needed: the snapshot reads rows as arrays."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.sglang.snapshot import SglangKVSnapshot


class _Tensor:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def numpy(self) -> np.ndarray:
        return self.array


def _snapshot(page: int) -> SglangKVSnapshot:
    rows = np.zeros((4, 16), np.int32)
    rows[1, :6] = [4, 5, 6, 7, 8, 9]
    rows[2, :5] = [4, 5, 6, 7, 12]  # shares a's first page
    rows[3, :3] = [20, 21, 22]
    scheduler = SimpleNamespace(req_to_token_pool=SimpleNamespace(req_to_token=_Tensor(rows)))
    live = {
        rid: SimpleNamespace(kv=SimpleNamespace(req_pool_idx=idx, kv_allocated_len=n))
        for rid, idx, n in (("a", 1, 6), ("b", 2, 5), ("c", 3, 3), ("none", None, 0))
    }
    config = EngineConfig(block_size=page, num_gpu_blocks=32 // page)
    return SglangKVSnapshot(scheduler, config, live, hidden=())


def test_ref_cnt_of_equals_the_full_count_at_every_id_asked():
    for page in (1, 4):
        snapshot = _snapshot(page)
        full = snapshot.ref_cnt()
        ids = np.array([4, 9, 12, 13, 0, 22, 23, 31, 4, 7], np.int64)
        assert snapshot.ref_cnt_of(ids).tolist() == full[ids].tolist()
        assert snapshot.ref_cnt_of(np.array([-1, 32, 5], np.int64)).tolist() == [0, 0, 2]
        assert snapshot.ref_cnt_of(np.zeros(0, np.int64)).tolist() == []
    assert _snapshot(1).ref_cnt_of(np.array([4, 12, 13], np.int64)).tolist() == [2, 1, 0]
    assert _snapshot(4).ref_cnt_of(np.array([10, 11, 13, 15], np.int64)).tolist() == [1, 1, 1, 1]
