"""Accounting and block-pool checkers on hand-built steps and snapshots: exact violations."""

import numpy as np

from schedcheck.engines.protocol import EngineConfig, ScheduledRequest, SchedulerOutput
from schedcheck.invariants.accounting import AccountingChecker
from schedcheck.invariants.block_pool import BlockPoolChecker, check_no_leak

CFG = EngineConfig(block_size=4, num_gpu_blocks=8, max_num_batched_tokens=16, max_num_seqs=2)


def _req(rid, ncomp, nsched, ntok, table, cached=0):
    tokens = np.zeros(nsched, np.int64)
    return ScheduledRequest(rid, ncomp, nsched, ntok, ntok, tokens, tuple(table), cached)


def _names(violations):
    return [(v.invariant, v.request_id) for v in violations]


def test_clean_chunks_pass_and_each_accounting_fault_is_named():
    acc = AccountingChecker(CFG)
    assert acc.check_step(SchedulerOutput(1, (_req("a", 0, 8, 10, [0, 1]),)), {"a": 10}) == []
    assert acc.check_step(SchedulerOutput(2, (_req("a", 8, 2, 10, [0, 1, 2]),)), {"a": 10}) == []
    gap = acc.check_step(SchedulerOutput(3, (_req("a", 11, 1, 12, [0, 1, 2]),)), {"a": 11})
    assert _names(gap) == [("accounting.num-tokens", "a"), ("accounting.contiguity", "a")]
    acc = AccountingChecker(CFG)
    step = SchedulerOutput(
        1, (_req("b", 8, 2, 10, [0, 1]), _req("c", 0, 8, 8, [3, 4]), _req("d", 0, 8, 8, [5, 6]))
    )
    assert _names(acc.check_step(step, {})) == [
        ("accounting.budget", ""),
        ("accounting.max-num-seqs", ""),
        ("accounting.block-table-short", "b"),
        ("accounting.admission", "b"),
    ]


def test_no_position_at_max_model_len_and_no_table_wider_than_the_runners():
    import dataclasses

    acc = AccountingChecker(dataclasses.replace(CFG, max_model_len=10))  # runner: 3 blocks
    assert acc.check_step(SchedulerOutput(1, (_req("a", 0, 9, 9, [0, 1, 2]),)), {}) == []
    assert acc.check_step(SchedulerOutput(2, (_req("a", 9, 1, 10, [0, 1, 2]),)), {}) == []
    past = acc.check_step(SchedulerOutput(3, (_req("a", 10, 1, 11, [0, 1, 2]),)), {})
    assert [(v.invariant, v.found, v.position) for v in past] == [
        ("accounting.max-model-len", "11", 10)
    ]
    wide = AccountingChecker(dataclasses.replace(CFG, max_model_len=10))
    [v] = wide.check_step(SchedulerOutput(1, (_req("b", 0, 4, 9, [0, 1, 2, 3]),)), {})
    assert (v.invariant, v.found) == ("accounting.max-model-len", "4 blocks")
    assert "cdiv(max_model_len 10, block_size) = 3" in v.message


def test_full_cache_hit_must_leave_one_token():
    acc = AccountingChecker(CFG)
    out = acc.check_step(SchedulerOutput(1, (_req("a", 8, 1, 8, [0, 1, 2], cached=8),)), {})
    assert ("accounting.full-hit-cap", "a") in _names(out)


class _Snap:
    block_size, num_blocks = 4, 6

    def __init__(self, ref, free, cached, tables):
        self._ref, self._free, self._cached, self._tables = ref, free, cached, tables

    def ref_cnt(self):
        return np.array(self._ref)

    def free_block_ids(self):
        return self._free

    def cached_blocks(self):
        return self._cached

    def block_tables(self):
        return self._tables

    def num_computed_tokens(self):
        return {}


def _contents(ids):
    return np.asarray(ids, dtype=np.uint64) % 3 + 1, np.ones(len(ids), dtype=bool)


def test_block_pool_faults():
    pool = BlockPoolChecker()
    ok = _Snap([1, 1, 0, 0, 0, 0], [2, 3, 4, 5], {}, {"a": [0, 1]})
    assert pool.check(1, ok, {"a"}, _contents) == []
    bad_ref = _Snap([2, 1, 0, 0, 0, 0], [2, 3, 4, 5], {}, {"a": [0, 1]})
    assert [v.invariant for v in pool.check(2, bad_ref, {"a"}, _contents)] == ["block-pool.ref-cnt"]
    lost = _Snap([1, 1, 0, 0, 0, 0], [2, 3, 4], {}, {"a": [0, 1]})
    assert [(v.invariant, v.block) for v in pool.check(3, lost, {"a"}, _contents)] == [
        ("block-pool.leak", 5)
    ]
    referenced_free = _Snap([1, 1, 0, 0, 0, 0], [1, 2, 3, 4, 5], {}, {"a": [0, 1]})
    assert [v.invariant for v in pool.check(4, referenced_free, {"a"}, _contents)] == [
        "block-pool.free-queue"
    ]
    stale = _Snap([1, 1, 0, 0, 0, 0], [2, 3, 4, 5], {}, {"gone": [0, 1]})
    assert [v.invariant for v in pool.check(5, stale, {"a"}, _contents)] == ["block-pool.owner"]


def test_equal_hash_must_mean_equal_content():
    pool = BlockPoolChecker()
    snap = _Snap([0] * 6, [0, 1, 2, 3, 4, 5], {0: b"h", 1: b"h"}, {})
    out = pool.check(1, snap, set(), _contents)  # blocks 0 and 1 hold different identities
    assert [(v.invariant, v.block) for v in out] == [("block-pool.hash-content", 1)]


def test_a_cached_block_must_hold_the_kv_its_hash_names():
    """All slots written, but for other tokens (a withdrawn chunk's block, still holding its
    previous holder's KV): caught when cached, where the engine says what the hash means."""
    pool = BlockPoolChecker()
    meaning = {b"h0": (1, "r1", 3, 0), b"h2": (3, "r2", 7, 1)}  # identity, request, position, group

    def expected(hashes):
        want = np.array([meaning[h][0] if h in meaning else 0 for h in hashes], np.uint64)
        return want, [meaning[h][1:] if h in meaning else None for h in hashes]

    pool.expected_content = expected
    # _contents: block 0 holds identity 1, block 2 holds 3, block 4 holds 2
    snap = _Snap([0] * 6, [0, 1, 2, 3, 4, 5], {0: b"h0", 2: b"h2", 4: b"h0", 5: b"?"}, {})
    out = pool.check(1, snap, set(), _contents)
    assert [(v.invariant, v.block, v.request_id, v.expected, v.found) for v in out] == [
        ("block-pool.cached-unwritten", 4, "r1", "identity 0x1", "identity 0x2")
    ]
    assert out[0].message == (
        "block 4 is in the prefix cache under the hash of r1's tokens up to position 3, but "
        "its slots were written for other tokens (never for these)"
    )
    assert pool.content_of_hash == {b"h0": 1, b"h2": 3, b"?": 3}  # the stale block names none


def test_without_a_meaning_a_stale_block_passes_as_written():
    pool = BlockPoolChecker()
    snap = _Snap([0] * 6, [0, 1, 2, 3, 4, 5], {4: b"h0"}, {})
    assert pool.check(1, snap, set(), _contents) == []


def test_no_leak_after_the_last_request():
    assert check_no_leak(9, _Snap([0, 0, 1, 0, 0, 0], [], {}, {}))[0].block == 2


def test_a_forward_jump_is_allowed_only_when_declared_a_cache_hit():
    acc = AccountingChecker(CFG)
    acc.check_step(SchedulerOutput(1, (_req("a", 0, 4, 20, [0, 1, 2, 3, 4]),)), {"a": 20})
    hit = acc.check_step(SchedulerOutput(2, (_req("a", 12, 4, 20, [0, 1, 2, 3, 4], 12),)), {})
    assert hit == []  # vLLM v0.6.0: the runner skips blocks another request computed
    gap = acc.check_step(SchedulerOutput(3, (_req("a", 18, 1, 20, [0, 1, 2, 3, 4], 12),)), {})
    assert _names(gap) == [("accounting.contiguity", "a")]


def _decode(rid, num_prompt_tokens, table):
    """A decode: one token after the prompt and an output are known."""
    tokens = np.zeros(1, np.int64)
    ntok = num_prompt_tokens + 1
    return ScheduledRequest(
        rid, ntok - 1, 1, ntok, num_prompt_tokens, tokens, tuple(table), ntok - 1
    )


def test_decodes_outside_the_budget_by_design_count_only_prompt_tokens():
    """nano-vllm runs every running decode whatever max_num_batched_tokens: 12 prompt tokens
    and 6 decodes are 18 > 16 for a budget that bounds decodes, 12 for one that does not;
    17 prompt tokens still break it."""
    cfg = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=16, max_num_seqs=8)
    decodes = tuple(_decode(f"d{i}", 4, [2 * i, 2 * i + 1]) for i in range(6))
    step = SchedulerOutput(1, (_req("p", 0, 12, 12, [20, 21, 22]), *decodes))
    bounded = AccountingChecker(cfg).check_step(step, {})
    assert [(v.invariant, v.found) for v in bounded] == [("accounting.budget", "18")]
    unbounded = AccountingChecker(cfg, decodes_within_budget=False).check_step(step, {})
    assert unbounded == []
    over = SchedulerOutput(1, (_req("p", 0, 17, 17, [20, 21, 22, 23, 24]), *decodes))
    over_budget = AccountingChecker(cfg, decodes_within_budget=False).check_step(over, {})
    assert [(v.invariant, v.found) for v in over_budget] == [("accounting.budget", "17")]
