"""The mutant catalog: every mutant is listed, valid, and changes behaviour in a named scenario.

Each `test_mutant_<name>` runs one small scenario twice, clean and with the mutant, and
asserts the exact field that differs (a schedule field, a block table, a token count, the
free pool). Where the bug corrupts KV, the shadow driver of refengine_helpers also reports
the wrong read for the mutant and none for the clean engine.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from refengine_helpers import (
    ShadowDriver,
    by_id,
    engine,
    ideal_outputs,
    request,
    step,
    summary,
    tokens,
)

from schedcheck.cli.entry import main
from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.reference.engine import make_engine
from schedcheck.engines.reference.mutants import (
    COMPONENTS,
    ENGINE_MUTANTS,
    MUTANTS,
    RUNNER_MUTANTS,
    apply_runner_mutant,
    get_mutant,
    known_names,
)

# -- the catalog ---------------------------------------------------------------------------


def test_catalog_has_at_least_twelve_distinct_documented_mutants():
    names = [m.name for m in MUTANTS]
    assert len(names) >= 12 and len(set(names)) == len(names)
    for mutant in MUTANTS:
        assert mutant.component in COMPONENTS
        assert mutant.bug_class.startswith("#") and mutant.reference and mutant.description
    assert {"seq-len-full-prompt", "slot-mapping-from-zero"} <= set(names)
    assert get_mutant("seq-len-full-prompt").reference == "nano-vllm 25794a1"
    assert get_mutant("slot-mapping-from-zero").reference == "vllm#36580"


def test_every_mutant_has_its_code_and_a_behaviour_test():
    assert set(ENGINE_MUTANTS).isdisjoint(RUNNER_MUTANTS)
    for mutant in MUTANTS:
        code = RUNNER_MUTANTS if mutant.component == "runner" else ENGINE_MUTANTS
        assert mutant.name in code, mutant.name
        assert f"test_mutant_{mutant.name.replace('-', '_')}" in globals(), mutant.name


def test_unknown_mutant_lists_the_known_names():
    with pytest.raises(ValueError, match="unknown mutant 'nope'; known: ") as info:
        make_engine(EngineConfig(mutant="nope"))
    for name in known_names():
        assert name in str(info.value)


def test_block_manager_mutant_needs_its_manager():
    with pytest.raises(ValueError, match="run it with block_manager='radix'"):
        make_engine(EngineConfig(mutant="radix-leak-chunk-kv", block_manager="hashed"))
    with pytest.raises(ValueError, match="run it with block_manager='hashed'"):
        make_engine(EngineConfig(mutant="hash-no-parent", block_manager="radix"))
    for bm in ("hashed", "radix"):  # scheduler and runner mutants run with either
        make_engine(EngineConfig(mutant="never-reject", block_manager=bm))
        make_engine(EngineConfig(mutant="slot-mapping-from-zero", block_manager=bm))


def test_cli_mutants_list_json(capsys):
    assert main(["mutants", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in listed] == [m.name for m in MUTANTS]
    for entry, mutant in zip(listed, MUTANTS, strict=True):
        assert set(entry) == {"name", "component", "bug_class", "reference", "description"}
        assert entry == mutant.to_json()


def test_cli_mutants_list_text(capsys):
    assert main(["mutants", "list"]) == 0
    text = capsys.readouterr().out
    for mutant in MUTANTS:
        assert mutant.name in text and mutant.reference in text


# -- one scenario per mutant ---------------------------------------------------------------


def _cached(eng) -> list[int]:
    return sorted(eng.kv_snapshot().cached_blocks())


def _driver(bm: str, mutant: str | None, **options) -> ShadowDriver:
    eng = engine(bm, mutant=mutant, **options)
    return ShadowDriver(eng, eng.config.block_size, eng.config.num_gpu_blocks, mutant=mutant)


def test_mutant_cache_partial_block():
    """A's first chunk ends inside block 1; A is aborted; B with the same prompt arrives."""
    results = {}
    for mutant in (None, "cache-partial-block"):
        driver = _driver("hashed", mutant, max_num_batched_tokens=6)
        driver.add(request("A", range(16), max_tokens=1))
        driver.step()
        cached = _cached(driver.eng)
        driver.abort("A")
        driver.add(request("B", range(16), max_tokens=1))
        out = driver.step()
        results[mutant] = (cached, by_id(out)["B"].num_computed_tokens, driver.read_errors)
    assert results[None] == ([0], 4, [])
    cached, num_computed, errors = results["cache-partial-block"]
    assert (cached, num_computed) == ([0, 1], 8)  # block 1 holds only tokens 4, 5
    assert errors == ["step 1 B: attention read wrong KV"]


def test_mutant_no_cache_hit_cap():
    """A fully cached prompt of 8 tokens (a multiple of block_size 4)."""
    results = {}
    for mutant in (None, "no-cache-hit-cap"):
        eng = engine("hashed", mutant=mutant)
        eng.add_request(request("A", range(8), max_tokens=1))
        step(eng)
        eng.add_request(request("B", range(8), max_tokens=1))
        out, _ = step(eng)
        results[mutant] = (
            [(r.request_id, r.num_computed_tokens) for r in out.scheduled],
            eng.waiting_reasons(),
        )
    assert results[None] == ([("B", 4)], {})
    assert results["no-cache-hit-cap"] == (
        [],
        {"B": "nothing to compute this step (prefix hit 8 of 8 tokens, 64 tokens of budget left)"},
    )


def test_mutant_whole_prompt_computed():
    """A prefills 16 tokens in chunks of 4; B with the same prompt arrives a step later."""
    results = {}
    for mutant in (None, "whole-prompt-computed"):
        driver = _driver(
            "hashed", mutant, max_num_batched_tokens=12, long_prefill_token_threshold=4
        )
        driver.add(request("A", range(16), max_tokens=1))
        out = driver.step()
        table, cached = out.scheduled[0].block_table, _cached(driver.eng)
        driver.add(request("B", range(16), max_tokens=1))
        out = driver.step()
        results[mutant] = (table, cached, by_id(out)["B"].num_computed_tokens, driver.read_errors)
    assert results[None] == ((0,), [0], 4, [])
    table, cached, num_computed, errors = results["whole-prompt-computed"]
    assert (table, cached, num_computed) == ((0, 1, 2, 3), [0, 1, 2, 3], 12)
    assert errors == ["step 1 B: attention read wrong KV"]  # positions 8..11: never written


def test_mutant_same_step_cached():
    """A and B with the same 12-token prompt in one step; A's chunk is 4 tokens."""
    results = {}
    for mutant in (None, "same-step-cached"):
        driver = _driver("hashed", mutant, long_prefill_token_threshold=4)
        driver.add(request("A", range(12), max_tokens=1))
        driver.add(request("B", range(12), max_tokens=1))
        out = driver.step()
        results[mutant] = ([r.num_computed_tokens for r in out.scheduled], driver.read_errors)
    assert results[None] == ([0, 0], [])
    assert results["same-step-cached"] == ([0, 8], ["step 0 B: attention read wrong KV"])


def test_mutant_block_table_short():
    """A chunk that ends exactly on a block boundary (4 tokens, block_size 4)."""
    results = {}
    for mutant in (None, "block-table-short"):
        driver = _driver("hashed", mutant, max_num_batched_tokens=4)
        driver.add(request("A", range(8), max_tokens=1))
        out = driver.step()
        slots = build_metadata(out, 4).slot_mapping.tolist()
        results[mutant] = (out.scheduled[0].block_table, slots, driver.read_errors[:1])
    assert results[None] == ((0,), [0, 1, 2, 3], [])
    assert results["block-table-short"] == (
        (),
        [-1, -1, -1, -1],
        ["step 0 A: write past the block table"],
    )


def test_mutant_no_lookahead_slots():
    """A 6-token prompt with 3 draft tokens (block_size 4): its drafts need positions 6..8."""
    results = {}
    for mutant in (None, "no-lookahead-slots"):
        eng = engine("hashed", mutant=mutant, num_lookahead_tokens=3)
        eng.add_request(request("A", range(6), max_tokens=2))
        out, _ = step(eng)
        meta = build_metadata(out, 4, num_lookahead_tokens=3, max_model_len=4096)
        results[mutant] = (out.scheduled[0].block_table, meta.lookahead_slot_mapping.tolist())
    assert results[None] == ((0, 1, 2), [6, 7, 8])
    assert results["no-lookahead-slots"] == ((0, 1), [6, 7, -1])


def test_mutant_stale_cache_hit():
    """B fails to get blocks while its hit block is then evicted and reused by C."""
    results = {}
    for mutant in (None, "stale-cache-hit"):
        driver = _driver("hashed", mutant, num_gpu_blocks=4)
        driver.add(request("A", range(4), max_tokens=1))
        driver.step()  # A: block 0, cached, finished
        driver.add(request("C", range(200, 212), max_tokens=2))
        driver.add(request("B", tokens(range(4), [7] * 8), max_tokens=1))
        driver.step()  # C takes blocks 1, 2, 3; B's hit (block 0) does not fit
        driver.step()  # C's decode takes block 0 from the queue head: A's hash evicted
        out = driver.step()  # C finished; B is admitted
        b = by_id(out)["B"]
        results[mutant] = (b.num_computed_tokens, b.block_table, driver.read_errors)
    assert results[None] == (0, (0, 3, 2), [])
    assert results["stale-cache-hit"] == (4, (0, 3, 2), ["step 3 B: attention read wrong KV"])


def test_mutant_manager_computed_disagree():
    """A fully cached prompt of 8 tokens: scheduler 8 computed, manager books 12."""
    results = {}
    for mutant in (None, "manager-computed-disagree"):
        eng = engine("hashed", mutant=mutant)
        eng.add_request(request("A", range(8), max_tokens=1))
        step(eng)
        eng.add_request(request("B", range(8), max_tokens=2))
        out, _ = step(eng)
        scheduler_count = eng.scheduler.requests["B"].num_computed_tokens
        manager_count = eng.kv_snapshot().num_computed_tokens()["B"]
        results[mutant] = (by_id(out)["B"].num_computed_tokens, scheduler_count, manager_count)
    assert results[None] == (4, 8, 8)
    assert results["manager-computed-disagree"] == (4, 8, 12)


def test_mutant_hash_no_parent():
    """B's first block has the tokens of A's second block, after a different prefix."""
    results = {}
    for mutant in (None, "hash-no-parent"):
        driver = _driver("hashed", mutant)
        driver.add(request("A", range(1, 9), max_tokens=1))
        driver.step()
        driver.add(request("B", tokens(5, 6, 7, 8, 9, 9, 9, 9, 9), max_tokens=1))
        out = driver.step()
        results[mutant] = (
            by_id(out)["B"].num_computed_tokens,
            by_id(out)["B"].block_table,
            driver.read_errors,
        )
    assert results[None] == (0, (2, 3, 4), [])
    assert results["hash-no-parent"] == (4, (1, 2, 3), ["step 1 B: attention read wrong KV"])


def test_mutant_hash_ignores_salt():
    """Same prompt, different cache salts: a salt is a separate namespace."""
    results = {}
    for mutant in (None, "hash-ignores-salt"):
        eng = engine("hashed", mutant=mutant)
        eng.add_request(request("A", range(8), max_tokens=1, cache_salt="tenant-a"))
        step(eng)
        eng.add_request(request("B", range(8), max_tokens=1, cache_salt="tenant-b"))
        out, _ = step(eng)
        results[mutant] = by_id(out)["B"].num_computed_tokens
    assert results == {None: 0, "hash-ignores-salt": 4}


@pytest.mark.parametrize("bm", ["hashed", "radix"])
def test_mutant_resume_drops_last_token(bm):
    """B is preempted after emitting one token; its re-prefill must include that token."""
    results = {}
    for mutant in (None, "resume-drops-last-token"):
        driver = _driver(
            bm, mutant, num_gpu_blocks=5, max_num_batched_tokens=32, enable_prefix_caching=False
        )
        driver.add(request("A", range(8), max_tokens=12))
        driver.add(request("B", range(50, 58), max_tokens=3))
        resumed = None
        preempted = False
        for step_index in range(40):
            if step_index == 6:
                driver.abort("A")  # make room for B
            out = driver.step()
            preempted = preempted or "B" in out.preempted_req_ids
            if preempted and resumed is None and "B" in by_id(out):
                resumed = (step_index, by_id(out)["B"])
            if "B" in driver.finished:
                break
        step_index, b = resumed
        outputs = list(driver.finished["B"].output_token_ids)
        results[mutant] = (
            step_index,
            b.num_scheduled_tokens,
            b.num_tokens,
            b.token_ids.tolist(),
            outputs,
        )
    ideal = ideal_outputs(np.arange(50, 58), 3)
    # Clean: B (9 tokens = 3 blocks) waits until A is aborted, then re-prefills all 9.
    assert results[None] == (6, 9, 9, [*range(50, 58), ideal[0]], ideal)
    # Mutant: the re-prefill lacks ideal[0] (8 tokens = 2 blocks fit at once) and samples
    # as if it did not exist: the same token again.
    step_index, scheduled, num_tokens, token_ids, outputs = results["resume-drops-last-token"]
    assert (step_index, scheduled, num_tokens, token_ids) == (2, 8, 8, list(range(50, 58)))
    assert outputs[:2] == [ideal[0], ideal[0]] and outputs != ideal


@pytest.mark.parametrize("name", ["slot-mapping-from-zero", "seq-len-full-prompt"])
def test_runner_mutants_change_metadata_not_the_schedule(name):
    schedules = {}
    for mutant in (None, name):
        eng = engine("hashed", mutant=mutant, max_num_batched_tokens=4)
        eng.add_request(request("A", range(8), max_tokens=1))
        schedules[mutant] = [summary(step(eng)[0]) for _ in range(2)]
    assert schedules[None] == schedules[name] == [[("A", 0, 4, (0,))], [("A", 4, 4, (0, 1))]]


def test_mutant_slot_mapping_from_zero():
    eng = engine("hashed", max_num_batched_tokens=4)
    eng.add_request(request("A", range(8), max_tokens=1))
    step(eng)
    out = eng.schedule()  # the second chunk: tokens [4, 8) in block 1
    assert build_metadata(out, 4).slot_mapping.tolist() == [4, 5, 6, 7]
    assert apply_runner_mutant(
        build_metadata(out, 4), "slot-mapping-from-zero"
    ).slot_mapping.tolist() == [0, 1, 2, 3]


def test_mutant_block_table_hits_only():
    """A's second chunk (computed 6) runs beside B's first: B reads through zeros."""
    eng = engine("hashed", max_num_batched_tokens=6)
    eng.add_request(request("A", range(8), max_tokens=1))
    first, _ = step(eng)  # A [0, 6): nobody has KV from before the step
    assert apply_runner_mutant(build_metadata(first, 4), "block-table-hits-only").as_documented
    eng.add_request(request("B", range(100, 104), max_tokens=1))
    second = eng.schedule()
    assert summary(second) == [("A", 6, 2, (0, 1)), ("B", 0, 4, (2,))]
    mutated = apply_runner_mutant(build_metadata(second, 4), "block-table-hits-only")
    assert mutated.block_tables == ((0, 1), (0,))
    assert build_metadata(second, 4).block_tables == ((0, 1), (2,))
    assert mutated.slot_mapping.tolist() == [6, 7, 8, 9, 10, 11]


def test_mutant_seq_len_full_prompt():
    eng = engine("hashed", max_num_batched_tokens=4)
    eng.add_request(request("A", range(8), max_tokens=1))
    out = eng.schedule()  # the first chunk: tokens [0, 4)
    assert build_metadata(out, 4).seq_lens.tolist() == [4]
    assert apply_runner_mutant(build_metadata(out, 4), "seq-len-full-prompt").seq_lens.tolist() == [
        8
    ]


def test_mutant_radix_leak_chunk_kv():
    """A and B insert the same pages in one step: B's duplicates must be freed once."""
    leaked = {}
    for mutant in (None, "radix-leak-chunk-kv"):
        eng = engine("radix", mutant=mutant)
        eng.add_request(request("A", range(12), max_tokens=2))
        eng.add_request(request("B", range(12), max_tokens=2))
        step(eng)
        snapshot = eng.kv_snapshot()
        held = {b for table in snapshot.block_tables().values() for b in table}
        accounted = set(snapshot.free_block_ids()) | set(snapshot.cached_blocks()) | held
        leaked[mutant] = (sorted(set(range(10)) - accounted), list(snapshot.free_block_ids()))
    assert leaked[None] == ([], [6, 7, 8, 9, 3, 4, 5])
    assert leaked["radix-leak-chunk-kv"] == ([3, 4, 5], [6, 7, 8, 9])


def test_mutant_radix_abort_frees_tree_pages():
    """Abort mid-chunk: page 0 is in the tree; it must not return to the free pool."""
    results = {}
    for mutant in (None, "radix-abort-frees-tree-pages"):
        eng = engine("radix", mutant=mutant, max_num_batched_tokens=6)
        eng.add_request(request("A", range(16), max_tokens=1))
        step(eng)
        output = eng.schedule()
        eng.abort_request("A")
        eng.update_from_output(output, {})
        snapshot = eng.kv_snapshot()
        free = list(snapshot.free_block_ids())
        results[mutant] = (free, sorted(set(free) & set(snapshot.cached_blocks())))
    assert results[None] == ([3, 4, 5, 6, 7, 8, 9, 2, 1], [])
    assert results["radix-abort-frees-tree-pages"] == ([3, 4, 5, 6, 7, 8, 9, 2, 1, 0], [0])


def test_mutant_radix_prefix_not_advanced():
    """Chunks of 2 tokens, pages of 4: every other chunk completes no page."""
    progress = {}
    for mutant in (None, "radix-prefix-not-advanced"):
        eng = engine("radix", mutant=mutant, long_prefill_token_threshold=2)
        eng.add_request(request("A", range(8), max_tokens=1))
        progress[mutant] = [step(eng)[0].scheduled[0].num_computed_tokens for _ in range(4)]
    assert progress[None] == [0, 2, 4, 6]
    assert progress["radix-prefix-not-advanced"] == [0, 0, 0, 0]  # livelock


def test_mutant_chunk_before_prefix_hit():
    """B hits 8 cached tokens of its 12; the chunk is sized as if nothing were cached."""
    results = {}
    for mutant in (None, "chunk-before-prefix-hit"):
        driver = _driver("hashed", mutant)
        driver.add(request("A", range(8), max_tokens=1))
        driver.step()
        driver.add(request("B", tokens(range(8), 7, 7, 7, 7), max_tokens=1))
        out = driver.step()
        b = by_id(out)["B"]
        slots = build_metadata(out, 4).slot_mapping.tolist()
        results[mutant] = (
            b.num_computed_tokens,
            b.num_scheduled_tokens,
            b.block_table,
            b.token_ids.tolist(),
            slots,
            driver.read_errors[:1],
        )
    assert results[None] == (8, 4, (0, 1, 2), [7, 7, 7, 7], [8, 9, 10, 11], [])
    assert results["chunk-before-prefix-hit"] == (
        8,
        12,
        (0, 1, 2),
        [7, 7, 7, 7] + [-1] * 8,
        [8, 9, 10, 11] + [-1] * 8,  # positions 12.. lie past the block table
        ["step 1 B: chunk token ids differ"],
    )


def test_mutant_never_reject():
    """A request needing 5 blocks in a 4-block cache; a small one arrives later."""
    results = {}
    for mutant in (None, "never-reject"):
        eng = engine("hashed", mutant=mutant, num_gpu_blocks=4)
        eng.add_request(request("big", range(12), max_tokens=6))
        outputs = []
        for step_index in range(12):
            if step_index == 6:
                eng.add_request(request("small", range(100, 104), max_tokens=1))
            outputs.append(step(eng)[0])
        results[mutant] = (
            outputs[0].rejected_req_ids,
            [o.step for o in outputs if o.preempted_req_ids],
            [o.step for o in outputs if o.scheduled],
            eng.waiting_reasons(),
        )
    assert results[None] == (("big",), [], [6], {})
    # big prefills (3 blocks) and decodes to 16 tokens; the 17th needs a fifth block: it
    # preempts itself, and its re-prefill (4 cached + 1 new block) can never fit. Running 0,
    # waiting 2, forever.
    assert results["never-reject"] == (
        (),
        [5],
        [0, 1, 2, 3, 4],
        {
            "big": "preempted 1x; not enough KV blocks: 4 cached + 1 new blocks for 17 "
            "tokens, 4 free or evictable of 4",
            "small": "queued behind 'big' (position 1 of the waiting queue)",
        },
    )


def _spec_step_rejecting_both_drafts(mutant: str | None, max_tokens: int):
    """A: 6-token prompt (blocks 0, 1), K = 2. Step 1 prefills it and samples 50; the
    drafter proposes 60, 61; step 2 runs [50, 60, 61] at positions 6..8, the sampler rejects
    both drafts and returns the bonus 70 (position 7)."""
    eng = engine("hashed", mutant=mutant, num_speculative_tokens=2)
    eng.add_request(request("A", range(6), max_tokens=max_tokens))
    out = eng.schedule()
    eng.update_from_output(out, {"A": 50})
    eng.update_draft_token_ids({"A": (60, 61)})
    out = eng.schedule()
    assert [s[:3] for s in summary(out)] == [("A", 6, 3)]
    assert out.scheduled[0].spec_token_ids == (60, 61)
    finished = eng.update_from_output(out, {"A": 70}, {"A": ()})
    return eng, finished


def test_mutant_spec_rollback_off_by_one():
    """Both drafts rejected: num_computed_tokens must roll back from 9 to 7 (position 7,
    the bonus 70, has no KV yet); the mutant stops at 8 and never computes position 7."""
    results = {}
    for mutant in (None, "spec-rollback-off-by-one"):
        eng, _ = _spec_step_rejecting_both_drafts(mutant, max_tokens=4)
        computed = eng.scheduler.requests["A"].num_computed_tokens
        out = eng.schedule()
        results[mutant] = (computed, [s[:3] for s in summary(out)])
    assert results[None] == (7, [("A", 7, 1)])
    assert results["spec-rollback-off-by-one"] == (8, [])  # nothing left to compute: stuck


def test_mutant_cache_rejected_draft_block():
    """A finishes with the bonus (max_tokens 2): 8 known tokens, KV true only for 0..6.
    Block 1 (positions 4..7) holds draft 60's KV at position 7: it must not be cached."""
    results = {}
    for mutant in (None, "cache-rejected-draft-block"):
        eng, finished = _spec_step_rejecting_both_drafts(mutant, max_tokens=2)
        assert [f.output_token_ids for f in finished] == [(50, 70)]
        results[mutant] = sorted(eng.kv_snapshot().cached_blocks())
    assert results[None] == [0]
    assert results["cache-rejected-draft-block"] == [0, 1]
