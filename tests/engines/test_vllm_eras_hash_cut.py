"""eras.block_hashes_bytes cuts vLLM's group id off in C only where vLLM's own cut is that
slice (probed once a process); elsewhere it calls vLLM's function per hash. Stand-in cuts
for vLLM's `get_block_hash`: no vLLM needed."""

from __future__ import annotations

import pytest

from schedcheck.engines.vllm.v1 import eras


@pytest.mark.parametrize(("cut", "sliced"), [(lambda h: h[:-4], True), (lambda h: h[:-2], False)])
def test_the_group_id_is_cut_as_vllm_cuts_it(monkeypatch, cut, sliced):
    monkeypatch.setattr(eras, "_get_block_hash", lambda: cut)
    eras._plain_as_slice.cache_clear()
    try:
        assert (eras._plain_as_slice() is not None) == sliced
        hashes = [b"a" * 12, b"b" * 40, b"c" * 36]
        assert eras.block_hashes_bytes(hashes, keep_group=False) == [cut(h) for h in hashes]
        with_uncached = [hashes[0], None]  # an uncached block: vLLM's function, one by one
        assert eras.block_hashes_bytes(with_uncached, keep_group=False) == [cut(hashes[0]), None]
    finally:
        eras._plain_as_slice.cache_clear()  # the next caller probes vLLM's own
