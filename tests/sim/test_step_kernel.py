"""The common step in one call (sim/step_kernel.py) does exactly what the Python path does:

- the kernel against the kernels it fuses, called in the Python path's order, on random
  steps: the same stage, identities, verified growth, tokens and state, exact values;
- each case it declines changes nothing (or, WRITTEN, only the writes);
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

from schedcheck.engines.reference.mutants import MUTANTS
from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.sim import shadow_kernels, step_kernel
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.sim.token_store import TokenStore
from schedcheck.traces.tokens import FIRST_TOKEN_ID

BLOCK_SIZE, NUM_BLOCKS, SPAN = 4, 32, 500
STEP = 7


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
            self.positions, self.row_req, self.logits, STEP, BLOCK_SIZE, SPAN,
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
        assert (
            k.count_misaligned(self.seq_lens, self.query_start_loc, self.row_req, self.positions)
            == 0
        )
        common, grown, num_blocks = k.verify_own_chunks(
            s.verified_len, s.verified_blocks, self.indices, self.starts, self.seq_lens,
            self.shadow, self.slots, true_ids, BLOCK_SIZE,
        )  # fmt: skip
        assert common
        batch = self.row_req[self.logits]
        appended, tokens = k.sample_append(
            s.ids, s.tokens, s.base, s.num_tokens, s.cap, self.indices[batch], batch,
            true_ids[self.logits], self.positions[self.logits], SPAN,
        )  # fmt: skip
        assert appended
        return step_kernel.DONE, true_ids, grown, num_blocks, tokens


def _copies(arrays):
    return [a.copy() for a in arrays]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("decode", [True, False])
def test_the_common_step_is_the_kernels_it_fuses(seed, decode):
    fused_step, python_step = Step(seed, decode), Step(seed, decode)
    got, want = fused_step.fused(), python_step.python_path()
    assert got[0] == step_kernel.DONE
    for g, w in zip(got[1:], want[1:], strict=True):
        assert g.tolist() == w.tolist()
    for g, w in zip(fused_step.state(), python_step.state(), strict=True):
        assert g.tolist() == w.tolist()
    assert got[4].size == 3 and fused_step.store.num_tokens[:3].tolist() == [
        n + 1 for n in Step(seed, decode).store.num_tokens[:3].tolist()
    ]


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


@pytest.mark.parametrize(
    "case", [_wrong_token, _misaligned, _outside, _verified_overwrite, _no_room, _unverified_before]
)
def test_a_declined_case_changes_nothing(case):
    s = Step(3)
    case(s)
    before = _copies(s.state())
    stage, *_ = s.fused()
    assert stage == step_kernel.NOTHING_DONE
    assert [a.tolist() for a in s.state()] == [a.tolist() for a in before]


def test_a_slot_written_twice_is_written_and_left_to_the_python_read():
    s = Step(4)
    s.slots[1] = s.slots[0]  # two requests' rows into one slot: the last write wins
    before_tokens = s.store.num_tokens.copy()
    stage, true_ids, grown, num_blocks, tokens = s.fused()
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


def _examples(strategy, n: int):
    found: list[Scenario] = []

    @settings(max_examples=n, database=None, derandomize=True)
    @given(strategy)
    def collect(scenario):
        found.append(scenario)

    collect()
    return found
