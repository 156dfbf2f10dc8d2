"""The shadow KV's compiled loops compute exactly what the numpy passes they replaced
computed: each kernel against its numpy formulation (the oracle) on random inputs, with the
cases that matter (a slot written twice in one step, rows past a request's known tokens, a
request repeated, a sampling the kernel must decline without changing anything)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from schedcheck.engines import slots as slots_module
from schedcheck.invariants import hash_model
from schedcheck.sim import sample_kernels, shadow_kernels
from schedcheck.sim.token_store import TokenStore, sample_and_terms
from schedcheck.traces.tokens import FIRST_TOKEN_ID

U64, I64 = np.uint64, np.int64
VOCAB_SIZE = 1000


def _store(rng: np.random.Generator, num_requests: int) -> TokenStore:
    store = TokenStore(arena=64, requests=4)
    for index in range(num_requests):  # bounded: the requests
        prompt = rng.integers(FIRST_TOKEN_ID, VOCAB_SIZE, int(rng.integers(1, 40)))
        assert store.add(prompt.size) == index
        store.build(index, prompt, salt=0)
    return store


def _ranges(rng: np.random.Generator, n: int, block_size: int, max_block: int):
    """n ranges of keys (lows, highs), a random table each (entries -1 .. max_block - 1,
    ending early at times), and the entries the ranges touch."""
    lows = rng.integers(0, 30, n)
    highs = lows + rng.integers(1, 14, n)
    tables = [
        tuple(rng.integers(-1, max_block, int(rng.integers(2, 12))).tolist()) for _ in range(n)
    ]
    first = lows // block_size
    num = (highs - 1) // block_size + 1 - first
    return lows, highs, tables, slots_module.touched_entries(tables, first.tolist(), num.tolist())


@pytest.mark.parametrize("seed", range(8))
def test_truth_of_rows_is_truth_of_each_position_and_finds_the_first_wrong_token(seed):
    rng = np.random.default_rng(seed)
    store = _store(rng, 6)
    indices = rng.permutation(6)[:4].astype(np.int32)
    known = store.num_tokens[indices]
    starts = rng.integers(0, known)  # some chunks run past the known tokens (truth 0, -1)
    counts = rng.integers(1, 12, indices.size)
    positions = np.concatenate([np.arange(s, s + c) for s, c in zip(starts, counts, strict=True)])
    want_ids, want_tokens = store.truth(indices.repeat(counts), positions)
    inputs = want_tokens.copy()
    if seed % 2:
        inputs[rng.integers(inputs.size)] += 1
    ids, tokens, first_wrong = shadow_kernels.truth_of_rows(
        store.base, store.num_tokens, store.ids, store.tokens, indices, starts, counts, inputs
    )
    assert ids.tolist() == want_ids.tolist() and tokens.tolist() == want_tokens.tolist()
    wrong = np.flatnonzero(want_tokens != inputs)
    assert first_wrong == (int(wrong[0]) if wrong.size else -1)


@pytest.mark.parametrize("seed", range(8))
def test_gather_keys_is_gather_slots_and_truth_of_each_key(seed):
    """Ranges within and past the known tokens, through tables that end early (slot -1
    past their end) or hold a negative entry: as gather_slots and TokenStore.truth say."""
    rng = np.random.default_rng(seed)
    store, block_size = _store(rng, 6), 4
    todo = np.sort(rng.permutation(6)[:4])  # batch indices; their store indices:
    who = rng.permutation(6)[: todo.size].astype(np.int32)
    lows, highs, tables, entries = _ranges(rng, todo.size, block_size, max_block=9)
    key_req, keys, slots, expected = shadow_kernels.gather_keys(
        store.base, store.num_tokens, store.ids, todo, who, lows, highs, entries, block_size
    )
    counts = highs - lows
    assert key_req.tolist() == np.repeat(todo, counts).tolist()
    ranges = [np.arange(a, b) for a, b in zip(lows, highs, strict=True)]
    assert keys.tolist() == np.concatenate(ranges).tolist()
    want_slots = slots_module.gather_slots(tables, lows.tolist(), counts.tolist(), block_size)
    assert slots.tolist() == want_slots.tolist()
    want_ids, _ = store.truth(np.repeat(who, counts), keys)
    assert expected.tolist() == want_ids.tolist()
    assert -1 in want_slots.tolist() and 0 in want_ids.tolist()  # both rare cases drawn


@pytest.mark.parametrize("seed", range(8))
def test_store_writes_reads_every_old_value_first_and_the_last_write_wins(seed):
    rng = np.random.default_rng(seed)
    num_slots, block_size = 64, 4
    shadow = rng.integers(0, 3, num_slots).astype(U64)  # 0: never written
    writer_req = np.full(num_slots, -1, np.int32)
    writer_pos = np.full(num_slots, -1, I64)
    writer_step = np.full(num_slots, -1, I64)
    verifiers = rng.integers(0, 3, num_slots // block_size).astype(np.int32)
    verified_blocks = rng.integers(0, 4, 5).astype(I64)
    n = 20
    slots = rng.integers(0, num_slots, n)  # repeats: a slot written twice in one step
    positions = rng.integers(0, 16, n)
    store_indices = rng.permutation(5).astype(np.int32)  # batch index -> store index
    batch = rng.integers(0, 5, n)
    writers = store_indices[batch]
    identities = rng.integers(1, 1 << 63, n).astype(U64)
    want = [a.copy() for a in (shadow, writer_req, writer_pos, writer_step)]
    want_old = want[0][slots]
    for array, values in zip(want, (identities, writers, positions, 7), strict=True):
        array[slots] = values
    held = verifiers[slots // block_size]
    own = positions // block_size < verified_blocks[writers]
    want_count = int(np.count_nonzero((want_old != 0) & (held > own)))
    written, old, count = shadow_kernels.store_writes(
        shadow, writer_req, writer_pos, writer_step, verifiers, verified_blocks,
        slots, positions, batch, store_indices, identities, 7, block_size, True,
    )  # fmt: skip
    assert written and old.tolist() == want_old.tolist() and count == want_count
    for got, expected in zip((shadow, writer_req, writer_pos, writer_step), want, strict=True):
        assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("slot", [-1, 16])
def test_store_writes_declines_a_slot_outside_the_cache_and_writes_nothing(slot):
    shadow = np.arange(16, dtype=U64)
    state = [shadow, np.full(16, -1, np.int32), np.full(16, -1, I64), np.full(16, -1, I64)]
    before = [a.copy() for a in state]
    slots = np.array([3, slot, 5], dtype=I64)
    zeros = np.zeros(3, dtype=I64)
    written, old, count = shadow_kernels.store_writes(
        *state, np.ones(4, np.int32), np.zeros(1, I64),
        slots, zeros, zeros, np.zeros(1, np.int32), np.full(3, 9, U64), 7, 4, True,
    )  # fmt: skip
    assert not written and old.size == 0 and count == 0
    for got, want in zip(state, before, strict=True):
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("block_size", [16, 12, 1])
def test_count_verified_overwrites_counts_writes_over_verified_kv(block_size):
    """Against its definition, write by write: a write over KV (old != 0) whose block some
    live request verified, less the writer's own verification of its position's block
    (where slots name positions). A power of two divides by a shift, 12 does not."""
    for seed in range(8):  # bounded: random cases
        rng = np.random.default_rng(seed)
        num_writes, num_blocks = 40, 6
        verifiers = rng.integers(0, 3, num_blocks)
        verified_blocks = rng.integers(0, 4, 5)
        slots = rng.integers(0, num_blocks * block_size, num_writes)
        positions = rng.integers(0, 4 * block_size, num_writes)
        batch = rng.integers(0, 3, num_writes)
        store_indices = rng.permutation(5)[:3]
        old = rng.integers(0, 2, num_writes).astype(U64)
        for slots_of_positions in (True, False):
            want = 0
            for w in range(num_writes):  # bounded: the writes
                own = slots_of_positions and (
                    positions[w] // block_size < verified_blocks[store_indices[batch[w]]]
                )
                want += bool(old[w]) and verifiers[slots[w] // block_size] > (1 if own else 0)
            got = shadow_kernels.count_verified_overwrites(
                verifiers, verified_blocks, slots, positions, batch, store_indices, old,
                block_size, slots_of_positions,
            )  # fmt: skip
            assert got == want


def test_log2_or_minus_one():
    got = [shadow_kernels._log2_or_minus_one(n) for n in (1, 2, 3, 12, 16, 17, 2**40)]
    assert got == [0, 1, -1, -1, 4, -1, 40]


def test_count_wrong_and_count_misaligned():
    shadow = np.array([5, 6, 0, 8], dtype=U64)
    slots = np.array([0, 1, 2, 3, 3])
    expected = np.array([5, 7, 0, 8, 9], dtype=U64)  # slot 1 wrong, key 2 expects 0, slot 3
    assert shadow_kernels.count_wrong(shadow, slots, expected) == 3
    seq_lens, qsl = np.array([5, 1]), np.array([0, 2, 3])
    row_req = np.array([0, 0, 1])
    assert shadow_kernels.count_misaligned(seq_lens, qsl, row_req, np.array([3, 4, 0])) == 0
    assert shadow_kernels.count_misaligned(seq_lens, qsl, row_req, np.array([3, 5, 1])) == 2


@pytest.mark.parametrize("seed", range(6))
def test_sample_append_samples_and_appends_as_the_numpy_path(seed):
    rng = np.random.default_rng(seed)
    mine, oracle = _store(rng, 5), _store(np.random.default_rng(seed), 5)
    writers = np.array([0, 2, 3], dtype=np.int32)
    batch = np.array([0, 1, 3])
    positions = mine.num_tokens[writers] - 1
    identity = rng.integers(1, 1 << 63, 3).astype(U64)
    ok, tokens = sample_kernels.sample_append(
        mine.ids, mine.tokens, mine.base, mine.num_tokens, mine.cap, writers, batch,
        identity, positions, VOCAB_SIZE - FIRST_TOKEN_ID,
    )  # fmt: skip
    want_tokens, terms = sample_and_terms(identity, positions + 1, VOCAB_SIZE)
    oracle.append_many(writers, want_tokens, terms)
    assert ok and tokens.tolist() == want_tokens.tolist()
    assert tokens.tolist() == hash_model.sample_tokens(identity, VOCAB_SIZE).tolist()
    for array in ("ids", "tokens", "num_tokens"):
        assert getattr(mine, array).tolist() == getattr(oracle, array).tolist()


def test_sample_append_declines_without_changing_anything():
    rng = np.random.default_rng(0)
    store = _store(rng, 3)
    writers = np.array([0, 1], dtype=np.int32)
    identity = np.array([11, 12], dtype=U64)
    before = [store.ids.copy(), store.tokens.copy(), store.num_tokens.copy()]
    cases = (
        (np.array([0, 1]), store.num_tokens[writers] - 2),  # not after the last token
        (np.array([1, 1]), store.num_tokens[writers] - 1),  # a request twice
    )
    for batch, positions in cases:
        ok, tokens = sample_kernels.sample_append(
            store.ids, store.tokens, store.base, store.num_tokens, store.cap, writers, batch,
            identity, positions, VOCAB_SIZE - FIRST_TOKEN_ID,
        )  # fmt: skip
        assert not ok and tokens.size == 0
    after = [store.ids, store.tokens, store.num_tokens]
    assert all((a == b).all() for a, b in zip(before, after, strict=True))


def test_grow_verified_reads_the_state_before_and_the_last_repeat_wins():
    verified_len = np.array([0, 10, 20], dtype=I64)
    verified_blocks = np.array([0, 3, 5], dtype=I64)
    who = np.array([0, 1, 1, 2], dtype=np.int32)  # request 1 twice (an engine's bug)
    highs = np.array([5, 30, 12, 20], dtype=I64)
    grown, num_blocks = shadow_kernels.grow_verified(verified_len, verified_blocks, who, highs, 4)
    assert verified_len.tolist() == [5, 12, 20]  # numpy's fancy assignment: the last wins
    assert grown.tolist() == [0, 1] and num_blocks.tolist() == [2, 8]


def _own_chunks_case():
    """Requests 0 and 2 (store indices) verified [0, 4) and [0, 2), and now each reads the
    rows of its chunk: 0 positions 4..5 (slots 8, 9), 2 positions 2..4 (slots 1, 2, 3)."""
    verified_len = np.array([4, 7, 2], dtype=I64)
    verified_blocks = np.array([1, 2, 1], dtype=I64)
    who = np.array([0, 2], dtype=np.int32)
    num_computed = np.array([4, 2], dtype=I64)
    seq_lens = np.array([6, 5], dtype=I64)
    slots = np.array([8, 9, 1, 2, 3], dtype=I64)
    shadow = np.zeros(12, dtype=U64)
    expected = np.array([11, 12, 21, 22, 23], dtype=U64)
    shadow[slots] = expected
    state = (verified_len, verified_blocks, who, num_computed, seq_lens, shadow, slots, expected)
    return state


def test_verify_own_chunks_grows_as_grow_verified_where_every_key_is_right():
    state = _own_chunks_case()
    common, grown, num_blocks = shadow_kernels.verify_own_chunks(*state, 4)
    assert common and state[0].tolist() == [6, 7, 5]
    assert grown.tolist() == [0, 1] and num_blocks.tolist() == [2, 2]  # ceil(6/4), ceil(5/4)


@pytest.mark.parametrize("change", ["wrong-key", "unwritten-key", "read-before", "empty-chunk"])
def test_verify_own_chunks_declines_without_changing_anything(change):
    """A wrong key, a key past the known tokens (expected 0), a request whose unverified
    keys start before its chunk, or a chunk of no rows: the general path takes the step."""
    verified_len, verified_blocks, who, num_computed, seq_lens, shadow, slots, expected = (
        _own_chunks_case()
    )
    if change == "wrong-key":
        shadow[2] ^= U64(1)
    elif change == "unwritten-key":
        expected[4] = shadow[3] = 0
    elif change == "read-before":
        verified_len[2] = 1
    else:
        seq_lens[1] = num_computed[1]
    before = (verified_len.copy(), verified_blocks.copy())
    common, grown, num_blocks = shadow_kernels.verify_own_chunks(
        verified_len, verified_blocks, who, num_computed, seq_lens, shadow, slots, expected, 4
    )
    assert not common and grown.size == num_blocks.size == 0
    assert verified_len.tolist() == before[0].tolist()
    assert verified_blocks.tolist() == before[1].tolist()


def test_add_verifiers_counts_each_occurrence():
    verifiers = np.zeros(4, dtype=np.int32)
    shadow_kernels.add_verifiers(verifiers, np.array([1, 3, 1], dtype=I64), 1)
    shadow_kernels.add_verifiers(verifiers, np.array([3], dtype=I64), -1)
    assert verifiers.tolist() == [0, 2, 0, 0]


def test_block_contents_is_the_last_identity_and_whether_every_slot_was_written():
    rng = np.random.default_rng(3)
    shadow = rng.integers(0, 4, 40).astype(U64)  # 0: a slot never written
    block_ids = np.array([9, 0, 3, 3, 7])
    slots = block_ids[:, None] * 4 + np.arange(4)
    last, complete = shadow_kernels.block_contents(shadow, block_ids, 4)
    assert last.tolist() == shadow[slots][:, -1].tolist()
    assert complete.tolist() == (shadow[slots] != 0).all(axis=1).tolist()
    assert sorted(set(complete.tolist())) == [False, True]  # both cases drawn


def test_numba_loads_with_the_first_executor_not_with_the_cli():
    """A process that never simulates (the CLI's --help, `trace stats`, a report) never
    loads numba and LLVM: the kernels are imported when the first executor and the first
    hash memory are built, and with the hash model's first identities or samples."""
    script = (
        "import sys\n"
        "import schedcheck.cli.entry, schedcheck.sim.loop\n"
        "assert 'numba' not in sys.modules, 'numba imported with the CLI'\n"
        "from schedcheck.invariants import hash_model\n"
        "hash_model.salt_identity('s')  # no kernel behind it\n"
        "assert 'numba' not in sys.modules, 'numba imported with the hash model'\n"
        "from schedcheck.sim.symbolic import SymbolicExecutor\n"
        "SymbolicExecutor(4, 16)\n"
        "assert 'numba' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_count_range_wrong_is_gather_keys_then_count_wrong_of_the_tagged_identities():
    """The same ranges as gather_keys (tables that end early, negative entries, keys past
    the known tokens, blocks outside the cache), identities tagged as a KV-cache group's:
    the count is that of the gathered arrays compared, before and after some slots change.
    Odd seeds end the cache two slots into block 9 (a block half in the cache: slot by slot)."""
    some_right = some_changed = 0
    for seed in range(16):  # bounded: random cases
        rng = np.random.default_rng(seed)
        store, block_size, tag = _store(rng, 6), 4, hash_model.group_tag(1)
        who = rng.permutation(6)[:4].astype(np.int32)
        lows, highs, _, entries = _ranges(rng, who.size, block_size, max_block=12)
        ranges = (store.base, store.num_tokens, store.ids, who, lows, highs, entries, block_size)
        _, keys, slots, expected = shadow_kernels.gather_keys(
            *ranges[:3], np.arange(who.size), *ranges[3:]
        )
        expected = np.where(expected != 0, expected ^ tag, expected)
        shadow = np.zeros(10 * block_size - 2 * (seed % 2), U64)  # blocks 10, 11: outside
        inside = (slots >= 0) & (slots < shadow.size)
        shadow[slots[inside]] = expected[inside]
        counts = []
        for _ in range(2):  # the keys as written, then every third one's slot changed
            found = np.where(inside, shadow[np.where(inside, slots, 0)], U64(0))
            want = int(np.count_nonzero(~inside | (found != expected) | (expected == 0)))
            got = shadow_kernels.count_range_wrong(*ranges, shadow, tag)
            assert got == (want, keys.size)
            counts.append(want)
            shadow[slots[inside][::3]] ^= U64(1)
        some_right += counts[0] < keys.size
        some_changed += counts[1] > counts[0]
    assert some_right >= 8 and some_changed >= 8  # both cases drawn often


def test_tag_identities_tags_every_known_identity_and_leaves_none_known_at_zero():
    tag = hash_model.group_tag(1)
    ids = np.array([0, 5, 2**63, 2**64 - 1, 0], np.uint64)
    got = shadow_kernels.tag_identities(ids, tag)
    assert got.dtype == np.uint64
    assert got.tolist() == [0, 5 ^ int(tag), 2**63 ^ int(tag), (2**64 - 1) ^ int(tag), 0]
    assert ids.tolist() == [0, 5, 2**63, 2**64 - 1, 0]  # a new array
    assert shadow_kernels.tag_identities(ids, np.uint64(0)).tolist() == ids.tolist()


def test_window_lows_starts_each_read_at_its_first_rows_window():
    """Window of 4 keys: a decode at position 9 reads keys 6..9; a chunk at positions 2..5
    reads from key 0 (its first row's window is cut at 0); a first row past its seq_len
    (misaligned metadata) reads nothing."""
    positions = np.array([9, 2, 3, 4, 5, 20], np.int64)
    query_start_loc = np.array([0, 1, 5, 6], np.int64)
    seq_lens = np.array([10, 6, 10], np.int64)
    todo, lows = shadow_kernels.window_lows(positions, query_start_loc, seq_lens, 4)
    assert (todo.tolist(), lows.tolist()) == ([0, 1], [6, 0, 10])
