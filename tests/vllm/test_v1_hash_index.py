"""BlockHashIndex (engines/vllm/v1/hash_index.py): what a vLLM v1 block hash means, with
exact values (tox -e vllm-v1: it reads vLLM's own hash-with-group-id layout)."""

from __future__ import annotations

from types import SimpleNamespace

from vllm_driver import NEEDS_VLLM_V1

pytestmark = NEEDS_VLLM_V1


def _index():
    from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex

    return BlockHashIndex()


def test_a_hash_names_its_request_and_the_last_token_of_its_block():
    index = _index()
    r1 = SimpleNamespace(block_hashes=[b"a" * 8, b"b" * 8])
    index.update({"r1": r1})
    assert index.positions([b"b" * 8, b"a" * 8, b"z" * 8], 4, grouped=False) == [
        ("r1", 7, 0),
        ("r1", 3, 0),
        None,
    ]
    r1.block_hashes.append(b"c" * 8)  # a decode filled another block
    index.update({"r1": r1})
    assert index.positions([b"c" * 8], 4, grouped=False) == [("r1", 11, 0)]


def test_a_grouped_hash_carries_vllms_group_id():
    from vllm.v1.core import kv_cache_utils

    index = _index()
    index.update({"r1": SimpleNamespace(block_hashes=[b"a" * 8, b"b" * 8])})
    if not hasattr(kv_cache_utils, "make_block_hash_with_group_id"):  # 0.10.1.1: a NamedTuple
        assert index.positions([repr(("b", 1)).encode()], 2, grouped=True) == [None]
        return
    grouped = kv_cache_utils.make_block_hash_with_group_id(kv_cache_utils.BlockHash(b"b" * 8), 1)
    assert index.positions([grouped], 2, grouped=True) == [("r1", 3, 1)]


def test_a_request_vllm_dropped_names_nothing_and_a_live_one_keeps_a_shared_hash():
    index = _index()
    shared = b"s" * 8
    index.update({"r1": SimpleNamespace(block_hashes=[shared, b"x" * 8])})
    index.update(
        {
            "r1": SimpleNamespace(block_hashes=[shared, b"x" * 8]),
            "r2": SimpleNamespace(block_hashes=[shared]),
        }
    )
    index.update({"r2": SimpleNamespace(block_hashes=[shared])})  # r1 gone
    assert index.positions([shared, b"x" * 8], 16, grouped=False) == [("r2", 15, 0), None]
