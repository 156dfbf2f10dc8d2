"""The shadow KV with scheduled drafts (acceptance, rollback) and sliding-window groups.

Block size 4. Prompt A: 10 tokens 100..109. The hash model's true next tokens after A are
`hash_model.unchunked_outputs(A, k)`.
"""

import numpy as np
import pytest

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput, parse_kv_groups
from schedcheck.invariants import hash_model
from schedcheck.sim.symbolic import SymbolicExecutor

BS = 4
PROMPT_A = np.arange(100, 110, dtype=np.int64)
TRUE = hash_model.unchunked_outputs(PROMPT_A, 6).tolist()  # A's outputs run alone
HYBRID = parse_kv_groups("full,sliding:4")
TAG = hash_model.group_tag(1)


def _req(rid, tokens, ncomp, nsched, table, drafts=(), groups=()):
    tokens = np.asarray(tokens, np.int64)
    chunk = np.concatenate([tokens[ncomp : ncomp + nsched - len(drafts)], drafts]).astype(np.int64)
    return ScheduledRequest(
        rid,
        ncomp,
        nsched,
        tokens.size,
        PROMPT_A.size,
        chunk,
        tuple(table),
        spec_token_ids=tuple(drafts),
        group_block_tables=tuple(tuple(t) for t in groups),
    )


def _step(ex, step, *reqs, kv_groups=None):
    out = SchedulerOutput(step, tuple(reqs))
    meta = (
        build_metadata(out, BS)
        if kv_groups is None
        else build_metadata(out, BS, kv_groups=kv_groups)
    )
    return ex.execute(meta), ex.violations


def _prefilled():
    """A's prompt in blocks 3, 1, 6 (keys 0..9) and its first output sampled."""
    ex = SymbolicExecutor(num_blocks=8, block_size=BS)
    ex.add_request("A", PROMPT_A)
    sampled, v = _step(ex, 1, _req("A", PROMPT_A, 0, 10, [3, 1, 6]))
    assert (sampled, v) == ({"A": TRUE[0]}, [])
    return ex, np.concatenate([PROMPT_A, [TRUE[0]]])


# -- drafts ----------------------------------------------------------------------------------


def test_every_draft_accepted_gives_the_drafts_and_a_bonus():
    ex, tokens = _prefilled()  # 11 tokens; position 10 (TRUE[0]) has no KV yet
    drafts = TRUE[1:3]
    sampled, v = _step(ex, 2, _req("A", tokens, 10, 3, [3, 1, 6, 2], drafts))
    assert v == []
    assert ex.accepted_token_ids == {"A": tuple(TRUE[1:3])}
    assert sampled == {"A": TRUE[3]}  # the bonus: sampled after the last accepted draft
    ids = hash_model.identities(np.asarray(PROMPT_A.tolist() + TRUE[:4], np.int64))
    # KV of positions 10, 11 (block 6, offsets 2, 3) and 12 (block 2, offset 0)
    assert ex.shadow[[26, 27, 8]].tolist() == ids[10:13].tolist()
    assert ex.requests["A"].num_tokens == 14
    assert ex.requests["A"].verified_len == 12  # 13 keys verified, kept to whole blocks


def test_a_rejected_draft_stops_acceptance_and_its_kv_is_overwritten_by_the_true_kv():
    ex, tokens = _prefilled()
    wrong = TRUE[2] + 1
    drafts = [TRUE[1], wrong]  # d1 right, d2 wrong
    sampled, v = _step(ex, 2, _req("A", tokens, 10, 3, [3, 1, 6, 2], drafts))
    assert v == []
    assert ex.accepted_token_ids == {"A": (TRUE[1],)}
    assert sampled == {"A": TRUE[2]}  # the bonus at the first rejection: the true token
    draft_seq = np.asarray([*PROMPT_A.tolist(), TRUE[0], TRUE[1], wrong], np.int64)
    draft_id = int(hash_model.identities(draft_seq)[12])
    assert int(ex.shadow[8]) == draft_id  # position 12 holds the rejected draft's KV
    assert ex.requests["A"].verified_len == 12  # keys 0..11 (blocks 3, 1, 6) stay valid
    tokens = np.asarray(PROMPT_A.tolist() + TRUE[:3], np.int64)  # 13 tokens now
    sampled, v = _step(ex, 3, _req("A", tokens, 12, 1, [3, 1, 6, 2]))  # rolled back to 12
    assert v == []
    true_id = int(hash_model.identities(tokens)[12])
    assert int(ex.shadow[8]) == true_id != draft_id
    assert sampled == {"A": TRUE[3]}


def test_a_rollback_one_short_reads_the_rejected_draft_kv():
    """After d2 is rejected the request knows 13 tokens and must recompute position 12; an
    engine that rolled back one token too few runs a chunk from 13 (with one more token it
    never had KV for) and reads key 12: the rejected draft's KV."""
    ex, tokens = _prefilled()
    _step(ex, 2, _req("A", tokens, 10, 3, [3, 1, 6, 2], [TRUE[1], TRUE[2] + 1]))
    ex.requests["A"].append(TRUE[3], int(hash_model.terms(np.array([13]), np.array([TRUE[3]]))[0]))
    tokens = np.asarray(PROMPT_A.tolist() + TRUE[:4], np.int64)  # 14 known (a decode later)
    _, v = _step(ex, 3, _req("A", tokens, 13, 1, [3, 1, 6, 2]))
    assert [(x.invariant, x.position, x.slot, x.block) for x in v] == [("shadow-kv.read", 12, 8, 2)]
    assert v[0].found.startswith("a rejected draft's KV of A position 12 (written at step 2)")


def test_draft_rows_write_the_drafted_sequence_and_sample_every_row():
    ex, tokens = _prefilled()
    wrong = TRUE[1] + 3
    sampled, v = _step(ex, 2, _req("A", tokens, 10, 3, [3, 1, 6, 2], [wrong, TRUE[2]]))
    assert v == []
    assert ex.accepted_token_ids == {"A": ()}
    assert sampled == {"A": TRUE[1]}  # row 10 samples the true token; d1 rejected
    assert ex.requests["A"].tokens[:12].tolist() == PROMPT_A.tolist() + TRUE[:2]


# -- sliding-window groups -------------------------------------------------------------------


def test_sliding_group_reads_exactly_the_window_inside_it():
    """W = 4: the row at position 10 reads keys 7..10 through the sliding table only."""
    ex = SymbolicExecutor(num_blocks=16, block_size=BS)
    ex.add_request("A", PROMPT_A)
    groups = ([3, 1, 6], [9, 10, 11])
    sampled, v = _step(
        ex, 1, _req("A", PROMPT_A, 0, 10, groups[0], groups=groups), kv_groups=HYBRID
    )
    assert (sampled, v) == ({"A": TRUE[0]}, [])
    ids = hash_model.identities(PROMPT_A)
    assert ex.shadow[[36, 37, 38, 39]].tolist() == (ids[:4] ^ TAG).tolist()  # group 1, block 9
    checked = ex.num_keys_checked
    tokens = np.concatenate([PROMPT_A, [TRUE[0]]])
    # block 9 (keys 0..3) is out of every window: freed and replaced by the null block 0
    tables = ([3, 1, 6], [0, 10, 11])
    sampled, v = _step(ex, 2, _req("A", tokens, 10, 1, tables[0], groups=tables), kv_groups=HYBRID)
    assert (sampled, v) == ({"A": TRUE[1]}, [])
    assert ex.num_keys_checked - checked == 1 + 4  # full: key 10; sliding: keys 7..10


def test_sliding_window_edge_key_is_read_and_a_stale_one_is_a_violation():
    """The first key of the window (position 10 - 4 + 1 = 7, block 10 offset 3) is read:
    overwritten by someone else, it is found."""
    ex = SymbolicExecutor(num_blocks=16, block_size=BS)
    ex.add_request("A", PROMPT_A)
    groups = ([3, 1, 6], [9, 10, 11])
    _step(ex, 1, _req("A", PROMPT_A, 0, 10, groups[0], groups=groups), kv_groups=HYBRID)
    ex.shadow[10 * BS + 3] = np.uint64(12345)  # key 7 of group 1 clobbered
    tokens = np.concatenate([PROMPT_A, [TRUE[0]]])
    tables = ([3, 1, 6], [0, 10, 11])
    _, v = _step(ex, 2, _req("A", tokens, 10, 1, tables[0], groups=tables), kv_groups=HYBRID)
    assert [(x.invariant, x.position, x.slot, x.block) for x in v] == [
        ("shadow-kv.read", 7, 43, 10)
    ]
    assert v[0].expected == "the KV of A position 7 (KV-cache group sliding:4)"


def _a_then_b_in_sliding_block(block_id):
    """A prefilled in blocks 3, 1, 6 (full) and 9, 10, 11 (sliding); then B (4 tokens,
    500..503) in block 2 (full) and `block_id` (sliding). Returns (ex, B's step)."""
    ex = SymbolicExecutor(num_blocks=16, block_size=BS)
    ex.add_request("A", PROMPT_A)
    other = np.arange(500, 504, dtype=np.int64)
    ex.add_request("B", other)
    groups = ([3, 1, 6], [9, 10, 11])
    _step(ex, 1, _req("A", PROMPT_A, 0, 10, groups[0], groups=groups), kv_groups=HYBRID)
    b = ScheduledRequest("B", 0, 4, 4, 4, other, (2,), group_block_tables=((2,), (block_id,)))
    return ex, _step(ex, 2, b, kv_groups=HYBRID)


def test_a_freed_out_of_window_block_holding_another_request_kv_is_not_read():
    """A's runner table still names block 9 for keys 0..3 (vLLM's runner keeps freed ids),
    and B has since written its own KV there: A's window (keys 7..10) never reads it."""
    ex, (sampled, v) = _a_then_b_in_sliding_block(9)
    assert v == [] and list(sampled) == ["B"]
    assert ex.writer_req[36] == ex.requests["B"].index  # block 9 now holds B's KV
    tokens = np.concatenate([PROMPT_A, [TRUE[0]]])
    tables = ([3, 1, 6], [9, 10, 11])  # the freed id is still in A's runner table
    sampled, v = _step(ex, 3, _req("A", tokens, 10, 1, tables[0], groups=tables), kv_groups=HYBRID)
    assert (sampled, v) == ({"A": TRUE[1]}, [])


def test_a_window_key_holding_another_request_group_kv_is_named_with_its_group():
    """B writes its sliding-group KV into block 10, which A's table still names for keys
    4..7: A's window read of key 7 finds B's KV of position 3, written by group 1 (its
    identity carries group 1's tag: not a rejected draft's, as it was once described)."""
    ex, _ = _a_then_b_in_sliding_block(10)
    groups = ([3, 1, 6], [9, 10, 11])
    tokens = np.concatenate([PROMPT_A, [TRUE[0]]])
    _, v = _step(ex, 3, _req("A", tokens, 10, 1, groups[0], groups=groups), kv_groups=HYBRID)
    assert [(x.invariant, x.position, x.slot, x.block) for x in v] == [
        ("shadow-kv.read", 7, 43, 10)
    ]
    assert v[0].found == "the KV of B position 3 (written at step 2, KV-cache group 1)"


def test_a_block_freed_inside_the_window_is_a_read_of_the_null_block():
    ex = SymbolicExecutor(num_blocks=16, block_size=BS)
    ex.add_request("A", PROMPT_A)
    groups = ([3, 1, 6], [9, 10, 11])
    _step(ex, 1, _req("A", PROMPT_A, 0, 10, groups[0], groups=groups), kv_groups=HYBRID)
    tokens = np.concatenate([PROMPT_A, [TRUE[0]]])
    tables = ([3, 1, 6], [0, 0, 11])  # block 10 (keys 4..7) freed although key 7 is in window
    _, v = _step(ex, 2, _req("A", tokens, 10, 1, tables[0], groups=tables), kv_groups=HYBRID)
    assert [(x.invariant, x.position, x.slot, x.block, x.found) for x in v] == [
        ("shadow-kv.read", 7, 3, 0, "nothing (never written)")
    ]


# -- runner metadata -------------------------------------------------------------------------


def test_metadata_samples_every_row_of_a_request_with_drafts_and_maps_slots_per_group():
    tokens = np.arange(100, 111, dtype=np.int64)  # 11 known
    b = _req("B", tokens[:3], 0, 3, [5])  # a 3-token prefill, no drafts
    a = _req("A", tokens, 10, 3, [3, 1, 6, 2], [7, 8], groups=([3, 1, 6, 2], [0, 0, 9, 4]))
    b = ScheduledRequest("B", 0, 3, 3, 3, b.token_ids, (5,), group_block_tables=((5,), (12,)))
    meta = build_metadata(SchedulerOutput(1, (b, a)), BS, kv_groups=HYBRID)
    assert meta.num_draft_tokens.tolist() == [0, 2]
    assert meta.spec_rows.tolist() == [3, 4, 5]  # A's rows: positions 10, 11, 12
    assert meta.logits_indices.tolist() == [2, 5]
    assert meta.slot_mapping.tolist() == [20, 21, 22, 26, 27, 8]
    assert meta.slots_of_group(1).tolist() == [48, 49, 50, 38, 39, 16]
    assert meta.input_ids.tolist() == [100, 101, 102, 110, 7, 8]


@pytest.mark.parametrize("one_call", [True, False], ids=["common step", "phase by phase"])
def test_a_hybrid_step_reads_group_0_by_the_common_path(monkeypatch, one_call):
    """A later group's writes do not take group 0's chunk off the common read: the prefill
    and the decode both run as the common step in one call (sim/step_kernel.py), or,
    phase by phase, verify group 0 through its one-kernel read; and read right."""
    from schedcheck.sim import shadow_kernels, step_kernel

    common = []
    module, name = (
        (step_kernel, "common_step") if one_call else (shadow_kernels, "verify_own_chunks")
    )
    original = getattr(module, name)

    def counted(*args):
        result = original(*args)
        common.append(result[0] == step_kernel.DONE if one_call else bool(result[0]))
        return result

    monkeypatch.setattr(module, name, counted)
    monkeypatch.setattr(SymbolicExecutor, "use_common_step", one_call)
    ex = SymbolicExecutor(num_blocks=16, block_size=BS)
    ex.add_request("A", PROMPT_A)
    groups = ([3, 1, 6], [9, 10, 11])
    first = _step(ex, 1, _req("A", PROMPT_A, 0, 10, groups[0], groups=groups), kv_groups=HYBRID)
    tokens = np.concatenate([PROMPT_A, [TRUE[0]]])
    second = _step(ex, 2, _req("A", tokens, 10, 1, groups[0], groups=groups), kv_groups=HYBRID)
    assert (first, second) == (({"A": TRUE[0]}, []), ({"A": TRUE[1]}, []))
    assert common == [True, True] and ex.store.verified_len[0] == 11
