"""Per-token slot lists (ScheduledRequest.slots, SGLang's req_to_token rows) through the
runner metadata and the shadow KV, and the writes of discarded steps; no SGLang needed."""

from __future__ import annotations

import numpy as np

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.invariants import hash_model
from schedcheck.sim.symbolic import SymbolicExecutor

PROMPT = np.arange(10, 16, dtype=np.int64)  # 6 tokens


def _req(rid, computed, count, num_tokens, tokens, slots, cached=0) -> ScheduledRequest:
    pages = tuple(s // 4 for s in slots[::4])  # page size 4
    return ScheduledRequest(
        rid, computed, count, num_tokens, 6, np.asarray(tokens, np.int64), pages, cached,
        slots=tuple(slots),
    )  # fmt: skip


def test_metadata_of_slot_lists_reads_and_writes_exactly_the_slots():
    """Slots that are not page-consistent (SGLang dedups a row onto the tree's slots): the
    chunk writes slots[2:6] and the table the kernels read is the slot list itself."""
    slots = (9, 3, 17, 18, 19, 21)
    out = SchedulerOutput(1, (_req("a", 2, 4, 6, PROMPT[2:], slots, cached=2),))
    meta = build_metadata(out, 4)
    assert meta.block_size == 1
    assert meta.slot_mapping.tolist() == [17, 18, 19, 21]
    assert meta.block_tables == (slots,)


def test_shadow_kv_reads_through_slot_lists_and_sees_a_discarded_write():
    """a writes its prompt into slots 4..9 and is retired; SGLang runs its next position once
    more (discarded) into slot 10; b shares a's 7 tokens through slots 4..10 and reads them
    all right. Without the discarded write, b's key 6 would read a never-written slot."""
    ex = SymbolicExecutor(num_blocks=4, block_size=4)  # 16 slots
    ex.add_request("a", PROMPT)
    sampled = ex.execute(
        build_metadata(SchedulerOutput(1, (_req("a", 0, 6, 6, PROMPT, range(4, 10)),)), 4)
    )
    assert ex.violations == [] and ex.block_size == 1  # slot granularity from the first step
    token = sampled["a"]
    ex.finish_request("a")
    discarded = _req("a", 6, 1, 7, [token], range(4, 11))
    ex.execute(build_metadata(SchedulerOutput(2, (), discarded=(discarded,)), 4))
    assert ex.violations == []
    b_prompt = np.asarray([*PROMPT, token, 99], np.int64)
    ex.add_request("b", b_prompt)
    b = _req("b", 7, 1, 8, [99], (*range(4, 11), 11), cached=7)
    ex.execute(build_metadata(SchedulerOutput(3, (b,)), 4))
    assert ex.violations == []
    assert int(ex.shadow[10]) == int(hash_model.identities(b_prompt[:7])[6])


def test_without_the_discarded_write_the_shared_slot_reads_as_never_written():
    ex = SymbolicExecutor(num_blocks=4, block_size=4)
    ex.add_request("a", PROMPT)
    sampled = ex.execute(
        build_metadata(SchedulerOutput(1, (_req("a", 0, 6, 6, PROMPT, range(4, 10)),)), 4)
    )
    ex.finish_request("a")
    ex.add_request("b", np.asarray([*PROMPT, sampled["a"], 99], np.int64))
    b = _req("b", 7, 1, 8, [99], (*range(4, 11), 11), cached=7)
    ex.execute(build_metadata(SchedulerOutput(2, (b,)), 4))
    first = ex.violations[0]
    assert (first.invariant, first.request_id, first.position, first.slot) == (
        "shadow-kv.read",
        "b",
        6,
        10,
    )
    assert first.found == "nothing (never written)"
    assert first.case == "never-written via prefix-hit"  # key 6 of b's 7 cached tokens
    assert first.signature == "shadow-kv.read[never-written via prefix-hit]"


def _c_verified_slots_0_to_5() -> SymbolicExecutor:
    """c wrote and read its prompt through slots 0..5 (it verified them)."""
    ex = SymbolicExecutor(num_blocks=4, block_size=4)
    ex.add_request("c", PROMPT)
    ex.execute(build_metadata(SchedulerOutput(1, (_req("c", 0, 6, 6, PROMPT, range(6)),)), 4))
    assert ex.violations == [] and ex.verifiers[:6].tolist() == [1] * 6
    return ex


def _discarded_write_into_slot_2(ex: SymbolicExecutor) -> None:
    """Aborted e's discarded step writes its position 0 into slot 2."""
    e = ScheduledRequest("e", 0, 1, 1, 1, np.asarray([7], np.int64), (0,), slots=(2,))
    ex.execute(build_metadata(SchedulerOutput(2, (), discarded=(e,)), 4))


def test_a_discarded_write_into_a_slot_the_live_request_no_longer_holds_is_legal():
    """SGLang's dedup moved c's row onto the tree's copy (slots 8..13) and freed 0..5; the
    aborted request's last step took slot 2. Nothing c holds is written: no violation, and c
    verifies its keys again through its new row."""
    ex = _c_verified_slots_0_to_5()
    ex.current_table = lambda rid: tuple(range(8, 14)) if rid == "c" else None
    _discarded_write_into_slot_2(ex)
    assert ex.violations == []
    assert ex.verifiers[:6].tolist() == [1, 1, 0, 0, 0, 0]  # c keeps keys 0, 1 only


def test_a_discarded_write_into_a_slot_the_live_request_still_holds_is_reported():
    ex = _c_verified_slots_0_to_5()
    ex.current_table = lambda rid: tuple(range(6)) if rid == "c" else None
    _discarded_write_into_slot_2(ex)
    [v] = ex.violations
    assert (v.invariant, v.request_id, v.slot) == ("block-pool.write-into-shared-block", "e", 2)
    assert v.message == (
        "the discarded step of aborted e writes slot 2, which holds KV a live request verified"
    )
