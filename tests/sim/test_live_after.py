"""The live requests less this step's finished ones, as the pool check reads them: `in`,
iteration, length, and `holds_all` (every table's owner at once, in C) agree."""

from __future__ import annotations

import pytest

from schedcheck.invariants import pool_reads
from schedcheck.sim.step_checks import _LiveAfter

LIVE = {"a": 1, "b": 2, "c": 3}


@pytest.mark.parametrize(
    ("request_ids", "expected"),
    [([], True), (["a"], True), (["a", "c"], True), (["b"], False), (["a", "d"], False)],
)
def test_holds_all_is_every_id_in_the_view(request_ids, expected):
    live = _LiveAfter(LIVE, {"b"})
    assert live.holds_all(request_ids) is expected
    assert all(rid in live for rid in request_ids) is expected
    assert pool_reads.all_live(live, request_ids) is expected
    assert pool_reads.all_live(set(live), request_ids) is expected  # no holds_all: one by one
    assert list(live) == ["a", "c"] and len(live) == 2
