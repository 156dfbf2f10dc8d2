"""The symbolic executor: exact writes, exact reads, and each misalignment named precisely."""

import numpy as np

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.engines.reference.mutants import apply_runner_mutant
from schedcheck.invariants import hash_model
from schedcheck.sim.symbolic import SymbolicExecutor

BS = 4
PROMPT_A = np.arange(100, 110, dtype=np.int64)  # 10 tokens
PROMPT_B = np.concatenate([PROMPT_A[:8], [7, 7, 7]])  # shares A's first 2 blocks


def _sched(rid, prompt, ncomp, nsched, table, ntok=None, tokens=None):
    ntok = prompt.size if ntok is None else ntok
    chunk = prompt[ncomp : ncomp + nsched] if tokens is None else np.asarray(tokens, np.int64)
    return ScheduledRequest(rid, ncomp, nsched, ntok, prompt.size, chunk, tuple(table))


def _step(ex, step, *reqs, mutant=None):
    meta = apply_runner_mutant(build_metadata(SchedulerOutput(step, tuple(reqs)), BS), mutant)
    return ex.execute(meta), ex.violations


def _executor():
    ex = SymbolicExecutor(num_blocks=8, block_size=BS)
    ex.add_request("A", PROMPT_A)
    ex.add_request("B", PROMPT_B)
    return ex


def test_chunked_prefill_writes_identities_and_samples_the_unchunked_token():
    ex = _executor()
    sampled, v = _step(ex, 1, _sched("A", PROMPT_A, 0, 6, [3, 1]))
    assert (sampled, v) == ({}, [])
    ids = hash_model.identities(PROMPT_A)
    assert ex.shadow[[12, 13, 14, 15, 4, 5]].tolist() == ids[:6].tolist()
    sampled, v = _step(ex, 2, _sched("A", PROMPT_A, 6, 4, [3, 1, 6]))
    assert v == []
    assert sampled == {"A": int(hash_model.unchunked_outputs(PROMPT_A, 1)[0])}
    assert ex.requests["A"].verified_len == 10
    assert ex.num_keys_checked == 6 + 4  # keys 0..5 at step 1, only the new 6..9 at step 2


def test_prefix_hit_reads_the_shared_blocks_and_is_clean():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6]))
    sampled, v = _step(ex, 2, _sched("B", PROMPT_B, 8, 3, [3, 1, 2]))
    assert v == []
    assert sampled == {"B": int(hash_model.unchunked_outputs(PROMPT_B, 1)[0])}
    assert ex.verifiers[[3, 1, 2, 6]].tolist() == [2, 2, 1, 1]


def test_hit_on_a_block_another_prefix_wrote_is_a_read_violation():
    ex = _executor()
    other = np.arange(500, 510, dtype=np.int64)
    ex.add_request("C", other)
    _step(ex, 1, _sched("C", other, 0, 10, [3, 1, 6]))
    _, v = _step(ex, 2, _sched("B", PROMPT_B, 8, 3, [3, 1, 2]))
    assert [(x.invariant, x.request_id, x.position, x.slot, x.block) for x in v] == [
        ("shadow-kv.read", "B", 0, 12, 3)
    ]
    assert v[0].found == "the KV of C position 0 (written at step 1)"


def test_reading_an_unwritten_block_names_it():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 4, [3, 1, 6]))  # only block 3 written
    _, v = _step(ex, 2, _sched("B", PROMPT_B, 8, 3, [3, 1, 2]))  # claims 8 cached tokens
    assert [(x.invariant, x.position, x.slot, x.block, x.found) for x in v] == [
        ("shadow-kv.read", 4, 4, 1, "nothing (never written)")
    ]


def test_seq_len_of_the_full_prompt_is_a_causal_misalignment():
    ex = _executor()
    _, v = _step(ex, 1, _sched("A", PROMPT_A, 0, 6, [3, 1, 6]), mutant="seq-len-full-prompt")
    kinds = [(x.invariant, x.position) for x in v]
    assert ("shadow-kv.causal-alignment", 0) in kinds
    assert ("shadow-kv.read", 6) in kinds  # key 6 was never written


def test_block_table_too_short_is_an_out_of_bounds_read():
    ex = _executor()
    _, v = _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1]))
    assert [(x.invariant, x.position) for x in v][:2] == [
        ("shadow-kv.write-out-of-bounds", 8),
        ("shadow-kv.block-table-out-of-bounds", 8),
    ]


def test_wrong_chunk_token_poisons_the_entry_and_the_sample():
    ex = _executor()
    bad = PROMPT_A[:10].copy()
    bad[9] = 1
    sampled, v = _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6], tokens=bad))
    assert [(x.invariant, x.position) for x in v] == [
        ("accounting.chunk-tokens", 9),
        ("shadow-kv.read", 9),  # the entry written from the wrong token
    ]
    assert sampled["A"] != int(hash_model.unchunked_outputs(PROMPT_A, 1)[0])


def test_a_changed_block_table_is_read_again():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 8, [3, 1, 6]))
    _, v = _step(ex, 2, _sched("A", PROMPT_A, 8, 2, [3, 5, 6]))  # block 1 swapped for 5
    assert [(x.invariant, x.position, x.block) for x in v] == [("shadow-kv.read", 4, 5)]


def test_overwriting_verified_kv_of_a_live_request_is_reported():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 8, [3, 1, 6]))
    _, v = _step(ex, 2, _sched("B", PROMPT_B, 0, 4, [1, 2, 4]))  # B writes into A's block 1
    assert ("block-pool.write-into-shared-block", "B", 1) in [
        (x.invariant, x.request_id, x.block) for x in v
    ]
    assert ex.requests["A"].verified_len == 4  # A must read block 1 again


def test_block_contents_and_finish_releases_verifiers():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 6, [3, 1]))
    ident, complete = ex.block_contents(np.array([3, 1]))
    assert complete.tolist() == [True, False]
    assert int(ident[0]) == int(hash_model.identities(PROMPT_A)[3])
    ex.finish_request("A")
    assert ex.verifiers.sum() == 0


def test_a_preempted_request_no_longer_owns_what_it_verified():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 8, [3, 1, 6]))
    preempt = SchedulerOutput(
        2, (_sched("B", PROMPT_B, 0, 4, [1, 2, 4]),), preempted_req_ids=("A",)
    )
    ex.execute(build_metadata(preempt, BS))
    assert ex.violations == []  # B may reuse A's freed block 1
    assert (ex.requests["A"].verified_len, ex.verifiers[[3, 1, 6]].tolist()) == (0, [0, 1, 0])


def test_block_copies_are_applied_before_the_forward():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 6, [3, 1]))  # block 1 holds positions 4, 5
    cow = SchedulerOutput(2, (_sched("A", PROMPT_A, 6, 4, [3, 2, 6]),), block_copies=((1, 2),))
    ex.execute(build_metadata(cow, BS))
    assert ex.violations == []
    assert ex.shadow[8:12].tolist() == hash_model.identities(PROMPT_A)[4:8].tolist()


def _copy_step(ex, step, copies, *reqs):
    output = SchedulerOutput(step, tuple(reqs), block_copies=tuple(copies))
    return ex.execute(build_metadata(output, BS)), ex.violations


def test_copy_on_write_moves_the_entries_before_the_forward():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6]))
    ex.finish_request("A")
    ex.add_request("C", PROMPT_A)  # reads block 6's copy in block 2
    _, v = _copy_step(ex, 2, [(6, 2)], _sched("C", PROMPT_A, 9, 1, [3, 1, 2]))
    assert v == []
    assert ex.shadow[8:10].tolist() == hash_model.identities(PROMPT_A)[8:10].tolist()


def test_copy_into_a_block_a_live_request_reads_is_reported():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6]))
    _, v = _copy_step(ex, 2, [(3, 1)])
    assert [(x.invariant, x.request_id, x.block) for x in v] == [
        ("block-pool.write-into-shared-block", "A", 1)
    ]


def test_a_block_copied_onto_itself_changes_nothing():
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6]))
    before = ex.shadow.copy()
    _, v = _copy_step(ex, 2, [(1, 1)])
    assert v == [] and np.array_equal(ex.shadow, before)
    assert ex.requests["A"].verified_len == 10


def test_a_copy_into_a_block_freed_by_the_same_steps_preemption_is_clean():
    """vLLM v0 preempts, then copies on write into the block the preemption freed (found
    by the vllm-v0 block manager v1 campaign): the preempted request reads it no more."""
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6]), _sched("B", PROMPT_B, 0, 4, [2]))
    output = SchedulerOutput(2, (), preempted_req_ids=("B",), block_copies=((3, 2),))
    ex.execute(build_metadata(output, BS))
    assert ex.violations == []


def test_a_copy_of_equal_content_into_a_read_block_is_clean():
    """v0 block manager v1 copies on write into a block promoted to the same content hash
    (found by the vllm-v0 campaign): what the reader verified there is unchanged."""
    ex = _executor()
    ex.add_request("A2", PROMPT_A)
    _step(ex, 1, _sched("A", PROMPT_A, 0, 8, [3, 1]), _sched("A2", PROMPT_A, 0, 8, [4, 5]))
    _, v = _copy_step(ex, 2, [(5, 1)])  # A2's second block onto A's: the same keys 4..7
    assert v == [] and ex.requests["A"].verified_len == 8


def _draft_step(ex, step, *reqs, k=3):
    meta = build_metadata(SchedulerOutput(step, tuple(reqs)), BS, num_lookahead_tokens=k)
    return ex.execute(meta), ex.violations


def test_drafts_are_written_past_the_sampled_position_and_then_overwritten():
    """A samples after position 9; drafts go to positions 10..12 (slots 26, 27, 8)."""
    ex = _executor()
    sampled, v = _draft_step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6, 2]))
    assert v == []
    assert ex.shadow[[26, 27, 8]].tolist() == [int(hash_model.DRAFT)] * 3
    assert sampled == {"A": int(hash_model.unchunked_outputs(PROMPT_A, 1)[0])}
    token = np.int64(sampled["A"])
    decode = ScheduledRequest("A", 10, 1, 11, 10, np.array([token]), (3, 1, 6, 2))
    _, v = _draft_step(ex, 2, decode)  # position 10's true KV replaces its draft
    assert v == []
    assert (
        ex.shadow[26] != hash_model.DRAFT
        and ex.shadow[[27, 8, 9]].tolist() == [int(hash_model.DRAFT)] * 3
    )
    kept = ex._draft_ids  # the drafts' identities: one array kept for every step, only read
    assert kept.size >= 3 and set(kept.tolist()) == {int(hash_model.DRAFT)}


def test_a_draft_past_the_block_table_is_an_out_of_bounds_write():
    ex = _executor()
    _, v = _draft_step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6]))  # covers 12 tokens
    assert [(x.invariant, x.request_id, x.position, x.slot) for x in v] == [
        ("shadow-kv.write-out-of-bounds", "A", 12, -1)
    ]
    assert "lookahead_slot_mapping (position 12)" in v[0].message


def test_a_draft_written_into_a_block_another_request_reads_is_reported():
    """A's table wrongly ends in B's verified block 1: A's drafts overwrite B's keys 4..6,
    and B's next read finds the draft KV there."""
    ex = _executor()
    _step(ex, 1, _sched("B", PROMPT_B, 0, 8, [3, 1]))
    short = np.arange(100, 105, dtype=np.int64)
    ex.add_request("S", short)
    _, v = _draft_step(ex, 2, _sched("S", short, 0, 5, [5, 1]))  # drafts: positions 5..7
    assert [(x.invariant, x.request_id, x.block) for x in v] == [
        ("block-pool.write-into-shared-block", "S", 1)
    ]
    _, v = _step(ex, 3, _sched("B", PROMPT_B, 8, 3, [3, 1, 2]))
    assert [(x.invariant, x.position) for x in v] == [("shadow-kv.read", 5)]
    assert "the draft KV (speculative decoding) of S position 5" in v[0].message


def test_a_slot_mapping_that_overwrites_the_writers_own_verified_key_names_that_key():
    """slot-mapping-from-zero: the decode of position 10 writes slot 12 (key 0's slot), which A
    verified; the shadow KV re-reads key 0 and names it (the tensor replay's first wrong
    key too), not only the never-written slot of key 10."""
    ex = _executor()
    _step(ex, 1, _sched("A", PROMPT_A, 0, 10, [3, 1, 6]))
    token = int(hash_model.unchunked_outputs(PROMPT_A, 1)[0])
    decode = ScheduledRequest("A", 10, 1, 11, 10, np.array([token]), (3, 1, 6))
    _, v = _step(ex, 2, decode, mutant="slot-mapping-from-zero")
    assert [(x.invariant, x.position, x.slot) for x in v] == [("shadow-kv.read", 0, 12)]
    assert "key 0 holds the KV of A position 10" in v[0].message


def test_a_recompute_of_equal_kv_into_a_block_a_live_request_verified_is_reported():
    """nano-vllm's fully cached prompt: B shares both of A's 8-token prompt blocks and
    recomputes its last token into A's block 1. The identity written is the one already
    there, but a floating-point kernel does not rewrite bit-identical values, and live A
    reads that slot: write-into-shared-block, whatever the values."""
    ex = SymbolicExecutor(num_blocks=8, block_size=BS)
    prompt = PROMPT_A[:8]
    ex.add_request("A", prompt)
    ex.add_request("B", prompt.copy())
    _, v = _step(ex, 1, _sched("A", prompt, 0, 8, [0, 1]))  # A writes and reads keys 0..7
    assert v == []
    before = int(ex.shadow[7])
    _, v = _step(ex, 2, _sched("B", prompt, 7, 1, [0, 1]))  # B: 7 cached, recomputes key 7
    assert int(ex.shadow[7]) == before  # the same identity
    [w] = v
    assert (w.invariant, w.request_id, w.slot, w.block) == (
        "block-pool.write-into-shared-block",
        "B",
        7,
        1,
    )
    assert w.message == "writes slot 7 of block 1, which holds key 7 of live request A"


def test_add_verifiers_counts_each_occurrence_in_the_loop_and_in_the_kernel():
    """A few blocks are counted in a loop, many by the compiled kernel: the same counts,
    a block named twice counted twice (an engine's bug)."""
    from schedcheck.sim.symbolic import FEW_BLOCKS

    few = [1, 3, 1]
    many = [2] * (FEW_BLOCKS + 1) + [5]
    assert len(few) <= FEW_BLOCKS < len(many)
    ex = SymbolicExecutor(num_blocks=8, block_size=4)
    ex._add_verifiers(few, 1)
    ex._add_verifiers(many, 1)
    ex._add_verifiers([3], -1)
    assert ex.verifiers.tolist() == [0, 2, FEW_BLOCKS + 1, 0, 0, 1, 0, 0]
