"""The shadow KV's arena of true tokens and identities (sim/token_store.py): what a gather
reads and an append writes survive region growth and compaction, its hash shortcuts give
the hash model's values, and it knows which requests were never read (not built yet)."""

import numpy as np

from schedcheck.invariants import hash_model
from schedcheck.sim import shadow_kernels
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.sim.token_store import TokenStore, mix64, sample_and_terms
from schedcheck.traces import tokens as trace_tokens


def _expected(prompt, appended):
    seq = np.asarray(list(prompt) + list(appended), np.int64)
    return seq, hash_model.identities(seq)


def test_regions_keep_their_tokens_through_growth_compaction_and_frees():
    store = TokenStore(arena=64, requests=2)  # tiny: every path runs (more requests, regrowth)
    rng = np.random.default_rng(7)
    prompts = [rng.integers(3, 1000, size=int(rng.integers(1, 40))) for _ in range(9)]
    appended: list[list[int]] = [[] for _ in prompts]
    for i, prompt in enumerate(prompts):
        assert store.add(prompt.size) == i
        store.build(i, prompt, 0)
    for step in range(60):
        live = np.array([i for i in range(len(prompts)) if store.base[i] >= 0], np.int64)
        tokens = rng.integers(3, 1000, size=live.size)
        terms = hash_model.terms(store.num_tokens[live], tokens)
        store.append_many(live, tokens, terms)
        for i, token in zip(live.tolist(), tokens.tolist(), strict=True):
            appended[i].append(token)
        if step % 15 == 14:  # a request finishes: its region is dropped when compacting
            store.free(int(live[0]))
    assert store.tokens.size > 64 and store.base.size > 2  # the arena and the arrays grew
    for i, prompt in enumerate(prompts):
        if store.base[i] < 0:
            continue
        seq, ids = _expected(prompt, appended[i])
        n = int(store.num_tokens[i])
        tokens, identities = store.region(i)
        assert n == seq.size and tokens[:n].tolist() == seq.tolist()
        assert identities[:n].tolist() == ids.tolist()


def test_a_gather_past_the_known_tokens_reads_no_token_and_identity_zero():
    store = TokenStore()
    prompt = np.array([5, 6, 7], np.int64)
    store.build(store.add(3), prompt, 0)
    ids, tokens, first_wrong = shadow_kernels.truth_of_rows(
        store.base, store.num_tokens, store.ids, store.tokens,
        np.array([0], np.int32), np.array([1]), np.array([4]), np.array([6, 7, -1, -1]),
    )  # fmt: skip
    assert tokens.tolist() == [6, 7, -1, -1] and first_wrong == -1
    assert ids.tolist() == [*hash_model.identities(prompt)[1:].tolist(), 0, 0]
    ids, tokens = store.truth(np.array([0, 0]), np.array([2, 9]))
    assert (tokens.tolist(), ids.tolist()) == ([7, -1], [int(hash_model.identities(prompt)[2]), 0])


def test_the_hash_shortcuts_give_the_hash_models_values():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2**63, size=500, dtype=np.int64).astype(np.uint64) * np.uint64(3)
    assert mix64(values).tolist() == trace_tokens.mix64(values).tolist()
    positions = rng.integers(0, 2**20, size=500)
    for vocab in (32_000, 151_936, 5):
        tokens, terms = sample_and_terms(values, positions, vocab)
        assert tokens.dtype == np.int64
        assert tokens.tolist() == hash_model.sample_tokens(values, vocab).tolist()
        assert terms.tolist() == hash_model.terms(positions, tokens).tolist()


def test_a_block_named_twice_counts_twice_among_the_verifiers():
    ex = SymbolicExecutor(num_blocks=8, block_size=4)
    ex._add_verifiers([5, 2, 5], 1)
    ex._add_verifiers([1, 2], 1)
    assert ex.verifiers.tolist() == [0, 1, 2, 0, 0, 2, 0, 0]
    ex._add_verifiers((5, 5), -1)
    assert ex.verifiers.tolist() == [0, 1, 2, 0, 0, 0, 0, 0]


def test_the_unbuilt_requests_are_those_added_and_neither_built_nor_freed():
    store = TokenStore(arena=64, requests=2)
    for n in (3, 5, 2, 4):  # more requests than the arrays hold: they grow
        store.add(n)
    assert store.unbuilt == {0, 1, 2, 3}
    store.build(2, np.arange(3, 5), 0)
    store.free(1)  # finished before it was ever read
    assert store.unbuilt == {0, 3}
    store.free(2)
    assert store.unbuilt == {0, 3}  # freeing a built request leaves the others as they were


def test_the_executor_builds_a_request_at_its_first_scheduled_step():
    from schedcheck.engines.metadata import build_metadata
    from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput

    executor = SymbolicExecutor(num_blocks=8, block_size=4, vocab_size=1000)
    for rid in ("a", "b"):
        executor.add_request(rid, np.arange(10, 16, dtype=np.int64))
    assert executor.store.unbuilt == {0, 1}
    chunk = np.arange(10, 14, dtype=np.int64)
    only_b = ScheduledRequest("b", 0, 4, 6, 6, chunk, (2, 3))
    executor.execute(build_metadata(SchedulerOutput(step=1, scheduled=(only_b,)), 4))
    assert executor.violations == []
    assert executor.store.unbuilt == {0}  # b was read: built; a waits, unbuilt
    assert executor.store.base[1] >= 0 > executor.store.base[0]
    executor.finish_request("a")
    assert executor.store.unbuilt == set()
