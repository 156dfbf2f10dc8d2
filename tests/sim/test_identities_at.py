"""The shadow KV's identities of many (request, position, group) at once, as the pool
check's meaning check reads them for vLLM's cached blocks (sim/symbolic.py)."""

import numpy as np

from schedcheck.invariants import hash_model
from schedcheck.sim.symbolic import SymbolicExecutor


def _shadow() -> SymbolicExecutor:
    shadow = SymbolicExecutor(num_blocks=8, block_size=4)
    shadow.add_request("a", np.arange(10, 20, dtype=np.int64))
    shadow.add_request("b", np.arange(30, 36, dtype=np.int64), cache_salt="s")
    return shadow


def test_identities_at_equals_identity_at_of_each():
    shadow = _shadow()
    wheres = [("a", 3, 0), ("b", 5, 0), ("a", 9, 0), ("a", 10, 0), ("b", -1, 0), ("a", 0, 0)]
    expected = [_shadow().identity_at(*where) for where in wheres]
    assert shadow.identities_at(wheres) == expected
    ids = hash_model.identities(np.arange(10, 20, dtype=np.int64))
    assert expected[:4:2] == [int(ids[3]), int(ids[9])] and expected[3] == 0  # past known


def test_identities_at_of_a_later_group_unknown_request_or_mixed_groups():
    shadow = _shadow()
    for wheres in (
        [("a", 3, 1), ("b", 2, 1)],
        [("a", 3, 0), ("gone", 2, 0)],
        [("a", 3, 0), ("b", 2, 1)],
        [("a", 3, 0), ("b", 2, 1), ("a", 12, 2), ("b", 5, 2)],  # three groups, one past known
    ):
        assert shadow.identities_at(wheres) == [_shadow().identity_at(*w) for w in wheres]
    assert shadow.identities_at([]) == []
    assert shadow.identities_at([("a", 3, 1)])[0] == shadow.identity_at("a", 3, 1) != 0
