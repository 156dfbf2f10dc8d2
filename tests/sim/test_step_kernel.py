"""The common step in one call (sim/step_kernel.py) does exactly what the Python path does:

- the kernel against the kernels it fuses, called in the Python path's order, on random
  steps, with one KV-cache group and with a sliding-window group after it: the same stage,
  identities, verified growth, tokens, keys read and state, exact values;
- each case it declines changes nothing (or, WRITTEN, only the writes), the hybrid step's
  own cases among them;
- whole runs of generated scenarios, every mutant of the catalog among them, report the
  same fingerprint, violations and counts with the common step and without it.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.reference.mutants import MUTANTS
from schedcheck.engines.slots import touched_entries
from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.invariants import hash_model
from schedcheck.sim import sample_kernels, shadow_kernels, step_kernel
from schedcheck.sim.common_step import NO_PREFIX, NO_WINDOW
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.sim.token_store import TokenStore
from schedcheck.traces import TraceRequest
from schedcheck.traces.tokens import FIRST_TOKEN_ID

BLOCK_SIZE, NUM_BLOCKS, SPAN = 4, 32, 500
STEP = 7
WINDOW = 3  # the sliding window of HybridStep's group 1, in keys
GROUP_1_FIRST_BLOCK = 16  # group 1's tables: blocks 16.. (group 0's: 0..11)
TAG = hash_model.group_tag(1)


class Step:
    """A store of three built requests, slots, and one step of them: request i runs the
    chunk [starts[i], starts[i] + counts[i]) through its block table, and samples."""

    def __init__(self, seed: int, decode: bool = True) -> None:
        rng = np.random.default_rng(seed)
        self.store = TokenStore(arena=64, requests=4)
        self.tables, chunks, starts = [], [], []
        for i in range(3):  # bounded: the requests
            prompt = rng.integers(FIRST_TOKEN_ID, SPAN, int(rng.integers(5, 14)))
            assert self.store.add(prompt.size) == i
            self.store.build(i, prompt, salt=0)
            self.tables.append(np.arange(4 * i, 4 * i + 4))  # 16 keys each
            start = prompt.size - 1 if decode else int(rng.integers(0, prompt.size))
            starts.append(start)
            chunks.append(np.arange(start, prompt.size))
            self.store.verified_len[i] = start  # verified all before its chunk
        self.indices = np.array([2, 0, 1], np.int32)
        order = self.indices.tolist()
        self.starts = np.array([starts[i] for i in order], np.int64)
        self.counts = np.array([chunks[i].size for i in order], np.int64)
        self.positions = np.concatenate([chunks[i] for i in order])
        self.row_req = np.repeat(np.arange(3), self.counts)
        tables = [self.tables[i] for i in order]
        self.slots = np.concatenate(
            [t[c // BLOCK_SIZE] * BLOCK_SIZE + c % BLOCK_SIZE for t, c in zip(
                tables, [chunks[i] for i in order], strict=True)]
        )  # fmt: skip
        self.seq_lens = self.starts + self.counts
        self.query_start_loc = np.concatenate([[0], np.cumsum(self.counts)])
        self.logits = self.query_start_loc[1:] - 1
        _, self.input_ids = self.store.truth(self.indices[self.row_req], self.positions)
        num_slots = NUM_BLOCKS * BLOCK_SIZE
        self.shadow = np.zeros(num_slots, np.uint64)
        self.writers = np.full(num_slots, -1, np.int32), np.full(num_slots, -1, np.int64)
        self.writer_step = np.full(num_slots, -1, np.int64)
        self.verifiers = np.zeros(NUM_BLOCKS, np.int32)
        self.prefix = NO_PREFIX
        self.window = NO_WINDOW

    def state(self) -> list[np.ndarray]:
        s = self.store
        return [s.base, s.num_tokens, s.cap, s.ids, s.tokens, s.verified_len, s.verified_blocks,
                self.shadow, *self.writers, self.writer_step, self.verifiers]  # fmt: skip

    def fused(self):
        s = self.store
        return step_kernel.common_step(
            (s.base, s.num_tokens, s.cap, s.ids, s.tokens),
            (self.shadow, *self.writers, self.writer_step, self.verifiers),
            s.verified_len, s.verified_blocks, self.indices, self.starts, self.counts,
            self.starts, self.seq_lens, self.query_start_loc, self.input_ids, self.slots,
            self.positions, self.row_req, self.logits, STEP, BLOCK_SIZE, SPAN, self.prefix,
            self.window,
        )  # fmt: skip

    def python_path(self):
        """The kernels the common step fuses, in the order symbolic.py calls them."""
        s, k = self.store, shadow_kernels
        true_ids, _, first_wrong = k.truth_of_rows(
            s.base, s.num_tokens, s.ids, s.tokens, self.indices, self.starts, self.counts,
            self.input_ids,
        )  # fmt: skip
        assert first_wrong < 0
        written, _, num_overwrites = k.store_writes(
            self.shadow, *self.writers, self.writer_step, self.verifiers, s.verified_blocks,
            self.slots, self.positions, self.row_req, self.indices, true_ids, STEP, BLOCK_SIZE,
            True,
        )  # fmt: skip
        assert written and num_overwrites == 0
        num_window_keys = self.python_window_writes(true_ids)
        assert (
            k.count_misaligned(self.seq_lens, self.query_start_loc, self.row_req, self.positions)
            == 0
        )
        grown, num_blocks, num_prefix_keys = self.python_read(true_ids)
        batch = self.row_req[self.logits]
        appended, tokens = sample_kernels.sample_append(
            s.ids, s.tokens, s.base, s.num_tokens, s.cap, self.indices[batch], batch,
            true_ids[self.logits], self.positions[self.logits], SPAN,
        )  # fmt: skip
        assert appended
        num_keys = num_prefix_keys + num_window_keys
        return step_kernel.DONE, true_ids, grown, num_blocks, tokens, num_keys

    def python_read(self, true_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """_read's common read: each request's unverified keys are its chunk."""
        s = self.store
        common, grown, num_blocks = shadow_kernels.verify_own_chunks(
            s.verified_len, s.verified_blocks, self.indices, self.starts, self.seq_lens,
            self.shadow, self.slots, true_ids, BLOCK_SIZE,
        )  # fmt: skip
        assert common
        return grown, num_blocks, 0

    def python_window_writes(self, true_ids: np.ndarray) -> int:
        """One KV-cache group: nothing (HybridStep writes and reads group 1)."""
        return 0


class HybridStep(Step):
    """Step with a sliding-window group 1 of WINDOW keys: its own tables, its KV of every
    key before the chunks written already (tagged), and the windows its rows read."""

    def __init__(self, seed: int, decode: bool = True) -> None:
        super().__init__(seed, decode)
        order = self.indices.tolist()
        tables = [tuple(range(GROUP_1_FIRST_BLOCK + 4 * i, GROUP_1_FIRST_BLOCK + 4 * i + 4))
                  for i in order]  # fmt: skip
        self.group_slots = self._slots_of(tables, self.row_req, self.positions)
        for b, (table, start) in enumerate(zip(tables, self.starts.tolist(), strict=True)):
            before = np.arange(start)  # written by earlier steps
            ids, _ = self.store.truth(np.full(start, self.indices[b], np.int32), before)
            self.shadow[self._slots_of([table], np.zeros(start, np.int64), before)] = ids ^ TAG
        firsts = self.positions[self.query_start_loc[:-1]]
        lows = np.minimum(np.maximum(firsts - (WINDOW - 1), 0), self.seq_lens)
        todo = np.flatnonzero(self.seq_lens > lows)
        lo, hi = lows[todo], self.seq_lens[todo]
        first = (lo // BLOCK_SIZE).tolist()
        num = ((hi - 1) // BLOCK_SIZE + 1 - lo // BLOCK_SIZE).tolist()
        entries = touched_entries([tables[i] for i in todo.tolist()], first, num)
        self.window = (self.group_slots, TAG, self.indices[todo], lo, hi, entries)

    @staticmethod
    def _slots_of(tables, row_req: np.ndarray, positions: np.ndarray) -> np.ndarray:
        blocks = [tables[r][p // BLOCK_SIZE] for r, p in zip(row_req, positions, strict=True)]
        return np.array(blocks, np.int64) * BLOCK_SIZE + positions % BLOCK_SIZE

    def python_window_writes(self, true_ids: np.ndarray) -> int:
        """_write's group 1 writes, then _read_group's read (all right)."""
        s, k = self.store, shadow_kernels
        tagged = np.where(true_ids != 0, true_ids ^ TAG, true_ids)
        written, _, num_overwrites = k.store_writes(
            self.shadow, *self.writers, self.writer_step, self.verifiers, s.verified_blocks,
            self.group_slots, self.positions, self.row_req, self.indices, tagged, STEP,
            BLOCK_SIZE, False,
        )  # fmt: skip
        assert written and num_overwrites == 0
        _, _, who, lo, hi, entries = self.window
        wrong, num_keys = k.count_range_wrong(
            s.base, s.num_tokens, s.ids, who, lo, hi, entries, BLOCK_SIZE, self.shadow, TAG
        )
        assert wrong == 0
        return int(num_keys)


class PrefixStep(Step):
    """Step whose request at batch index PREFIX_REQ verified nothing yet, its keys before
    its chunk written by an earlier step (a prefix-cache hit, or a resumed request): it
    reads them through its block table first (`prefix`)."""

    def __init__(self, seed: int, decode: bool = True) -> None:
        super().__init__(seed, decode)
        b, start = PREFIX_REQ, int(self.starts[PREFIX_REQ])
        index = int(self.indices[b])
        assert start > 0
        table = tuple(self.tables[index].tolist())
        before = np.arange(start)
        ids, _ = self.store.truth(np.full(start, index, np.int32), before)
        self.shadow[HybridStep._slots_of([table], np.zeros(start, np.int64), before)] = ids
        self.store.verified_len[index] = 0
        entries = touched_entries([table], [0], [(start - 1) // BLOCK_SIZE + 1])
        self.prefix = (np.array([b]), np.array([0]), np.array([start]), entries)

    def python_read(self, true_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """_read's general path: the chunks' rows compared, then the prefix read."""
        s, k = self.store, shadow_kernels
        assert k.count_wrong(self.shadow, self.slots, true_ids) == 0
        b, lo, hi, entries = self.prefix
        wrong, num_keys = k.count_range_wrong(
            s.base, s.num_tokens, s.ids, self.indices[b], lo, hi, entries, BLOCK_SIZE,
            self.shadow, np.uint64(0),
        )  # fmt: skip
        assert wrong == 0
        grown, num_blocks = k.grow_verified(
            s.verified_len, s.verified_blocks, self.indices, self.seq_lens, BLOCK_SIZE
        )
        return grown, num_blocks, int(num_keys)


PREFIX_REQ = 1  # PrefixStep's request that reads keys before its chunk


def _copies(arrays):
    return [a.copy() for a in arrays]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("decode", [True, False])
@pytest.mark.parametrize(
    "kind", [Step, HybridStep, PrefixStep], ids=["one group", "hybrid", "prefix"]
)
def test_the_common_step_is_the_kernels_it_fuses(seed, decode, kind):
    fused_step, python_step = kind(seed, decode), kind(seed, decode)
    got, want = fused_step.fused(), python_step.python_path()
    assert got[0] == step_kernel.DONE
    for g, w in zip(got[1:5], want[1:5], strict=True):
        assert g.tolist() == w.tolist()
    assert got[5] == want[5]
    for g, w in zip(fused_step.state(), python_step.state(), strict=True):
        assert g.tolist() == w.tolist()
    assert got[4].size == 3 and fused_step.store.num_tokens[:3].tolist() == [
        n + 1 for n in kind(seed, decode).store.num_tokens[:3].tolist()
    ]


def test_the_hybrid_step_reads_each_window():
    """Decode rows at positions p read keys [p - WINDOW + 1, p] through group 1: WINDOW
    keys a request (all three are past WINDOW tokens), and its one chunk key in group 0."""
    s = HybridStep(0)
    assert s.positions.min() >= WINDOW - 1
    *_, num_window_keys = s.fused()
    assert num_window_keys == 3 * WINDOW


def test_the_prefix_step_reads_the_keys_before_the_chunk():
    """A decode of a request that verified nothing reads its `start` keys before its
    chunk through its table (the keys read through tables; the chunks' rows the caller
    counts); every request's keys are then verified."""
    s = PrefixStep(0)
    start = int(s.starts[PREFIX_REQ])
    stage, *_, num_keys = s.fused()
    assert (stage, num_keys) == (step_kernel.DONE, start)
    assert s.store.verified_len[s.indices].tolist() == s.seq_lens.tolist()


def test_a_wrong_prefix_key_is_written_and_left_to_the_python_read():
    s = PrefixStep(2)
    table = s.tables[int(s.indices[PREFIX_REQ])]
    s.shadow[int(table[0]) * BLOCK_SIZE] ^= np.uint64(1)  # key 0, an earlier step's KV
    before_tokens = s.store.num_tokens.copy()
    stage, true_ids, grown, num_blocks, tokens, num_keys = s.fused()
    assert stage == step_kernel.WRITTEN
    assert s.shadow[s.slots].tolist() == true_ids.tolist()  # the chunks written
    assert (grown.size, num_blocks.size, tokens.size, num_keys) == (0, 0, 0, 0)
    assert s.store.num_tokens.tolist() == before_tokens.tolist()  # nothing sampled
    assert s.store.verified_len[int(s.indices[PREFIX_REQ])] == 0


def _wrong_token(s: Step) -> None:
    s.input_ids[1] += 1


def _misaligned(s: Step) -> None:
    s.seq_lens[0] += 1


def _outside(s: Step) -> None:
    s.slots[0] = NUM_BLOCKS * BLOCK_SIZE


def _verified_overwrite(s: Step) -> None:  # another request verified the block written
    s.shadow[s.slots[0]] = 5
    s.verifiers[s.slots[0] // BLOCK_SIZE] = 1


def _no_room(s: Step) -> None:
    s.store.cap[int(s.indices[0])] = s.store.num_tokens[int(s.indices[0])]


def _unverified_before(s: Step) -> None:
    s.store.verified_len[int(s.indices[1])] -= 1


def _window_slot_outside(s: HybridStep) -> None:
    s.group_slots[0] = NUM_BLOCKS * BLOCK_SIZE


def _window_verified_overwrite(s: HybridStep) -> None:  # group 1's block a request verified
    s.shadow[s.group_slots[0]] = 5
    s.verifiers[s.group_slots[0] // BLOCK_SIZE] = 1


def _window_slot_is_group_0s(s: HybridStep) -> None:  # two groups' KV into one slot
    s.group_slots[1] = s.slots[2]


def _prefix_not_listed(s: PrefixStep) -> None:  # keys before a chunk, not handed over
    s.prefix = NO_PREFIX


def _prefix_of_other_keys(s: PrefixStep) -> None:  # a range that is not [verified, computed)
    b, lo, hi, entries = s.prefix
    s.prefix = (b, lo + 1, hi, entries)


def _prefix_of_a_verified_request(s: PrefixStep) -> None:  # one more range than unverified
    b, lo, hi, entries = s.prefix
    table = tuple(s.tables[int(s.indices[2])].tolist())
    start = int(s.starts[2])
    more = touched_entries([table], [0], [(start - 1) // BLOCK_SIZE + 1])
    s.prefix = (
        np.array([b[0], 2]), np.array([lo[0], 0]), np.array([hi[0], start]),
        np.concatenate([entries, more]),
    )  # fmt: skip


CASES = [_wrong_token, _misaligned, _outside, _verified_overwrite, _no_room, _unverified_before]
WINDOW_CASES = [_window_slot_outside, _window_verified_overwrite, _window_slot_is_group_0s]
PREFIX_CASES = [_prefix_not_listed, _prefix_of_other_keys, _prefix_of_a_verified_request]


@pytest.mark.parametrize(
    "kind, case",
    [(Step, c) for c in CASES]
    + [(HybridStep, c) for c in CASES + WINDOW_CASES]
    + [(PrefixStep, c) for c in CASES + PREFIX_CASES],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_a_declined_case_changes_nothing(kind, case):
    s = kind(3)
    case(s)
    before = _copies(s.state())
    stage, *_ = s.fused()
    assert stage == step_kernel.NOTHING_DONE
    assert [a.tolist() for a in s.state()] == [a.tolist() for a in before]


def test_a_wrong_window_key_is_written_and_left_to_the_python_read():
    s = HybridStep(5)
    _, _, _, lo, _, _ = s.window
    b = 0  # the first request's first window key, before its chunk: an earlier step's KV
    assert lo[b] < s.starts[b]
    table = tuple(range(GROUP_1_FIRST_BLOCK + 4 * int(s.indices[b]), GROUP_1_FIRST_BLOCK + 64))
    slot = table[int(lo[b]) // BLOCK_SIZE] * BLOCK_SIZE + int(lo[b]) % BLOCK_SIZE
    s.shadow[slot] ^= np.uint64(1)
    before_tokens = s.store.num_tokens.copy()
    stage, true_ids, grown, num_blocks, tokens, num_window_keys = s.fused()
    assert stage == step_kernel.WRITTEN
    assert s.shadow[s.slots].tolist() == true_ids.tolist()  # both groups written
    assert s.shadow[s.group_slots].tolist() == (true_ids ^ TAG).tolist()
    assert (grown.size, num_blocks.size, tokens.size, num_window_keys) == (0, 0, 0, 0)
    assert s.store.num_tokens.tolist() == before_tokens.tolist()  # nothing sampled


def test_a_slot_written_twice_is_written_and_left_to_the_python_read():
    s = Step(4)
    s.slots[1] = s.slots[0]  # two requests' rows into one slot: the last write wins
    before_tokens = s.store.num_tokens.copy()
    stage, true_ids, grown, num_blocks, tokens, _ = s.fused()
    assert stage == step_kernel.WRITTEN
    assert int(s.shadow[s.slots[0]]) == int(true_ids[1]) != int(true_ids[0])
    assert int(s.writer_step[s.slots[0]]) == STEP
    assert (grown.size, num_blocks.size, tokens.size) == (0, 0, 0)
    assert s.store.num_tokens.tolist() == before_tokens.tolist()  # nothing sampled


# -- whole runs: the same reports with the common step and without it ----------------------


@contextlib.contextmanager
def _python_path_only():
    with mock.patch.object(SymbolicExecutor, "use_common_step", False):
        yield


def _report(scenario: Scenario):
    r = scenario.run()
    return r.fingerprint, r.violations, r.exit_code, r.invariants_checked, r.stuck, r.steps


@settings(deadline=None)
@given(
    st.sampled_from([None, *sorted(m.name for m in MUTANTS)]).flatmap(
        lambda m: scenarios(SwarmSpec(mutant=m))
    )
)
def test_a_run_reports_the_same_with_the_common_step_and_without(scenario):
    fused = _report(scenario)
    with _python_path_only():
        plain = _report(scenario)
    assert fused == plain


def test_the_common_step_runs_in_a_plain_run():
    """The differential test above compares something: most steps take the common step."""
    taken = []
    original = SymbolicExecutor._common_step

    def counted(self, *args):
        written, sampled = original(self, *args)
        taken.append(sampled is not None)
        return written, sampled

    scenario = next(
        s for s in _examples(scenarios(SwarmSpec(faults=False)), 20) if s.num_requests >= 4
    )
    with mock.patch.object(SymbolicExecutor, "_common_step", counted):
        scenario.run()
    assert sum(taken) > len(taken) // 2


def _prompt(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(range(lo, hi))


# b reads a's two cached blocks at its first step; b is preempted (8 blocks, 4 tokens each,
# two requests growing to 20 tokens) and resumes on its cached blocks; a's drafts, half of
# them rejected, cut its verified keys back to the block boundary before them each step
REREADS = {
    "prefix hit": (
        [TraceRequest("a", 0, 2, prompt_token_ids=_prompt(100, 112)),
         TraceRequest("b", 1.0, 2, prompt_token_ids=_prompt(100, 108) + _prompt(200, 204))],
        EngineConfig(block_size=4),
    ),
    "preempted": (
        [TraceRequest("a", 0, 12, prompt_token_ids=_prompt(100, 108)),
         TraceRequest("b", 0, 12, prompt_token_ids=_prompt(200, 208))],
        EngineConfig(block_size=4, num_gpu_blocks=8),
    ),
    "drafts": (
        [TraceRequest("a", 0, 12, prompt_token_ids=_prompt(100, 110))],
        EngineConfig(block_size=4, num_speculative_tokens=2),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REREADS))
def test_a_step_reading_keys_before_its_chunk_takes_the_common_step(case):
    """The step that reads cached keys a request has not verified (after a prefix hit,
    after its preemption cut them, or after rejected drafts did) is done in one call (the
    drafts then accepted in Python), and the run reports the same without the common
    step."""
    trace, config = REREADS[case]
    rereads = []
    original = SymbolicExecutor._common_step

    def recorded(self, meta, reqs, idx, reread, num_known):
        unverified = bool((self.store.verified_len[idx] < meta.num_computed_tokens).any())
        written, sampled = original(self, meta, reqs, idx, reread, num_known)
        rereads.append((unverified, sampled is not None, bool(num_known)))
        return written, sampled

    def report():
        r = run(trace, "reference", config, SimOptions(draft_acceptance=0.5), profile("unit"))
        return r.fingerprint, r.violations, r.exit_code, r.invariants_checked, r.steps

    with mock.patch.object(SymbolicExecutor, "_common_step", recorded):
        fused = report()
    assert fused[1:3] == ([], 0)
    # keys before a chunk unverified, and the step done (with drafts, in the drafts' case)
    assert (True, True, case == "drafts") in rereads
    with _python_path_only():
        assert report() == fused


def _examples(strategy, n: int):
    found: list[Scenario] = []

    @settings(max_examples=n, database=None, derandomize=True)
    @given(strategy)
    def collect(scenario):
        found.append(scenario)

    collect()
    return found
