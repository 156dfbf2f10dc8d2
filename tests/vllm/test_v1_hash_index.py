"""BlockHashIndex (engines/vllm/v1/hash_index.py): what a vLLM v1 block hash means, with
exact values (tox -e vllm-v1: it reads vLLM's own hash-with-group-id layout)."""

from __future__ import annotations

from types import SimpleNamespace

from vllm_driver import NEEDS_VLLM_V1

pytestmark = NEEDS_VLLM_V1


def _index():
    from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex

    return BlockHashIndex()


def _request(rid: str, *hashes: bytes) -> SimpleNamespace:
    return SimpleNamespace(request_id=rid, block_hashes=list(hashes))


def test_a_hash_names_its_request_and_the_last_token_of_its_block():
    index = _index()
    r1 = _request("r1", b"a" * 8, b"b" * 8)
    index.note("r1")
    index.update({"r1": r1})
    assert index.positions([b"b" * 8, b"a" * 8, b"z" * 8], 4, grouped=False) == [
        ("r1", 7, 0),
        ("r1", 3, 0),
        None,
    ]
    r1.block_hashes.append(b"c" * 8)  # a decode filled another block
    index.note("r1")
    index.update({"r1": r1})
    assert index.positions([b"c" * 8], 4, grouped=False) == [("r1", 11, 0)]


def test_only_requests_the_hasher_hashed_for_are_walked():
    from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex

    index = BlockHashIndex(lambda request: [b"n" * 8] if request.request_id == "r1" else [])
    r1, r2 = _request("r1", b"a" * 8), _request("r2", b"b" * 8)
    assert index.block_hasher(r1) == [b"n" * 8]  # vLLM's hasher's answer, passed through
    assert index.block_hasher(r2) == []  # hashed nothing: not noted
    index.update({"r1": r1, "r2": r2})
    assert index.positions([b"a" * 8, b"b" * 8], 4, grouped=False) == [("r1", 3, 0), None]


def test_a_grouped_hash_carries_vllms_group_id():
    from vllm.v1.core import kv_cache_utils

    index = _index()
    index.note("r1")
    index.update({"r1": _request("r1", b"a" * 8, b"b" * 8)})
    if not hasattr(kv_cache_utils, "make_block_hash_with_group_id"):  # 0.10.1.1: a NamedTuple
        assert index.positions([repr(("b", 1)).encode()], 2, grouped=True) == [None]
        return
    grouped = kv_cache_utils.make_block_hash_with_group_id(kv_cache_utils.BlockHash(b"b" * 8), 1)
    assert index.positions([grouped], 2, grouped=True) == [("r1", 3, 1)]


def test_a_request_vllm_dropped_names_nothing_and_a_live_one_keeps_a_shared_hash():
    index = _index()
    shared = b"s" * 8
    r1, r2 = _request("r1", shared, b"x" * 8), _request("r2", shared)
    index.note("r1")
    index.update({"r1": r1})
    index.note("r2")
    index.update({"r1": r1, "r2": r2})
    index.update({"r2": r2})  # r1 gone, not noted: its entries stay until pruned
    assert index.positions([shared, b"x" * 8], 16, grouped=False) == [("r2", 15, 0), None]


def test_a_request_added_again_under_its_id_is_indexed_afresh():
    index = _index()
    index.note("r1")
    index.update({"r1": _request("r1", b"a" * 8, b"b" * 8)})
    index.note("r1")  # a new Request, a new block_hashes list
    index.update({"r1": _request("r1", b"c" * 8)})
    assert index.positions([b"a" * 8, b"b" * 8, b"c" * 8], 4, grouped=False) == [
        None,
        None,
        ("r1", 3, 0),
    ]


def test_dropped_requests_are_pruned_once_they_outnumber_the_live_ones_by_the_slack():
    from schedcheck.engines.vllm.v1.hash_index import PRUNE_SLACK

    index = _index()
    requests = {f"r{i}": _request(f"r{i}", i.to_bytes(8, "big")) for i in range(PRUNE_SLACK + 2)}
    for rid in requests:
        index.note(rid)
    index.update(requests)
    assert len(index._where) == PRUNE_SLACK + 2
    index.update({"r0": requests["r0"]})  # PRUNE_SLACK + 1 dropped: more than the slack
    assert len(index._where) == 1
    assert index.positions([(0).to_bytes(8, "big")], 4, grouped=False) == [("r0", 3, 0)]


def test_on_a_replay_every_hash_answers_as_a_walk_of_every_live_request_would():
    """The incremental index against the walk it replaced, at every pool check of a real
    vLLM replay with prefix hits: the same hashes unanswered, and every answer names a
    live request whose block_hashes hold that hash at that block."""
    from schedcheck.engines.protocol import EngineConfig
    from schedcheck.engines.vllm.v1 import eras
    from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex
    from schedcheck.sim.cost_model import profile
    from schedcheck.sim.loop import SimOptions, Simulation
    from schedcheck.traces.schema import TraceRequest

    checked = []
    positions = BlockHashIndex.positions

    def compared(self, hashes, block_size, grouped):
        out = positions(self, hashes, block_size, grouped)
        live = self._requests
        walked = {}
        for rid, request in live.items():  # the old way: every live request's hashes
            for j, h in enumerate(request.block_hashes):
                walked.setdefault(eras.request_hash_key(h), (rid, j))
        for h, got in zip(hashes, out, strict=True):
            assert (got is None) == (h not in walked), h
            if got is not None:
                rid, last, _ = got
                j = (last + 1) // block_size - 1
                assert eras.request_hash_key(live[rid].block_hashes[j]) == h
        checked.append(len(hashes))
        return out

    shared = tuple(range(1, 49))  # three blocks every request shares
    own = [tuple(range(100 * i, 100 * i + 9 * i)) for i in range(1, 13)]  # 9..108 tokens
    trace = [
        TraceRequest(f"r{i}", 0.01 * i, 6, prompt_token_ids=shared + own[i - 1])
        for i in range(1, 13)
    ]
    BlockHashIndex.positions = compared
    try:
        config = EngineConfig(block_size=16, num_gpu_blocks=64, max_num_batched_tokens=64,
                              max_num_seqs=4, max_model_len=512)  # fmt: skip
        result = Simulation(trace, "vllm-v1", config, SimOptions(), profile("unit")).run()
    finally:
        BlockHashIndex.positions = positions
    assert not result.violations, [v.headline() for v in result.violations]
    assert result.finished == 12 and sum(checked) > 12


def test_a_request_naming_one_hash_twice_is_dropped_whole():
    """Chained hashes repeat only by collision (or in an engine under test); the drop
    must not trip over the second copy."""
    index = _index()
    twice = b"t" * 8
    index.note("r1")
    index.update({"r1": _request("r1", twice, twice)})
    index.note("r2")
    index.update({"r1": _request("r1", twice, twice), "r2": _request("r2", twice)})
    index.note("r1")  # a new Request under r1: the old entries go
    index.update({"r1": _request("r1", b"n" * 8), "r2": _request("r2", twice)})
    assert index.positions([twice, b"n" * 8], 4, grouped=False) == [("r2", 3, 0), ("r1", 3, 0)]
    index.note("r2")  # r2 goes, and r3 names a hash twice
    index.note("r3")
    r1, r3 = _request("r1", b"n" * 8), _request("r3", b"u" * 8, b"u" * 8)
    index.update({"r1": r1, "r3": r3})
    assert index.positions([twice, b"u" * 8], 4, grouped=False) == [None, ("r3", 3, 0)]
    index.note("r3")  # r3 goes: it alone named its hash, twice
    index.update({"r1": r1})
    assert index.positions([b"u" * 8, b"n" * 8], 4, grouped=False) == [None, ("r1", 3, 0)]


def test_hashes_read_in_bulk_equal_those_read_one_by_one():
    from collections import namedtuple

    from schedcheck.engines.vllm.v1 import eras

    plain = [b"a" * 8, b"b" * 8]
    assert eras.request_hash_keys(plain) == plain and eras.request_hash_keys(plain)[0] is plain[0]
    old_style = namedtuple("BlockHash", "hash_value token_ids")(7, (1, 2))  # 0.10.1.1's shape
    assert eras.request_hash_keys([old_style]) == [repr(old_style).encode()]
    from vllm.v1.core import kv_cache_utils

    if not hasattr(kv_cache_utils, "get_block_hash"):  # 0.10.1.1: no bytes hashes
        return
    for keep_group in (True, False):
        for cached in ([b"x" * 12, None, b"y" * 12], [None]):
            one_by_one = [
                None if h is None else eras.block_hash_bytes(h, keep_group) for h in cached
            ]
            assert eras.block_hashes_bytes(cached, keep_group) == one_by_one
    assert eras.block_hashes_bytes([b"x" * 8 + b"\0\0\0\1"], keep_group=False) == [b"x" * 8]


def test_the_first_of_several_requests_naming_a_hash_answers_until_it_is_dropped():
    """r1, r2 and r3 name one hash, in that order (r2 at its second block): the oldest
    still indexed answers; dropping it leaves the next, then the last; a hash each names
    alone goes with it."""
    index = _index()
    shared = b"s" * 8
    live = {
        "r1": _request("r1", shared),
        "r2": _request("r2", b"y" * 8, shared),
        "r3": _request("r3", shared, b"z" * 8),
    }
    for rid in live:
        index.note(rid)
        index.update(dict(live))
    assert index.positions([shared], 16, grouped=False) == [("r1", 15, 0)]
    for dropped, answer in (("r1", ("r2", 31, 0)), ("r2", ("r3", 15, 0)), ("r3", None)):
        del live[dropped]
        index.note(dropped)  # vLLM no longer has it: dropped at the next update
        index.update(dict(live))
        assert index.positions([shared], 16, grouped=False) == [answer]
    assert index._where == {}
