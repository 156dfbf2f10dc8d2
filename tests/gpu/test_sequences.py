"""True sequences: parent chains resolved (full prompt = parent's + its outputs + own)."""

from __future__ import annotations

import numpy as np
import pytest

from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.gpu.sequences import (
    check_vocab,
    extend_from_schedule,
    full_prompts,
    true_sequences,
)
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import expand_hash_ids


def test_turns_and_hash_ids_resolve() -> None:
    first = TraceRequest("t1", 0.0, 2, input_length=5, hash_ids=(7, 8), hash_block_size=4)
    second = TraceRequest("t2", 1.0, 1, prompt_token_ids=(50, 51), parent_request_id="t1")
    third = TraceRequest("t3", 2.0, 1, prompt_token_ids=(60,), parent_request_id="t2")
    outputs = {"t1": [90, 91], "t2": [92], "t3": [93]}
    own = expand_hash_ids((7, 8), 4, 5)
    prompts = full_prompts([third, first, second], outputs)  # any line order
    assert prompts["t1"].tolist() == own.tolist()
    assert prompts["t2"].tolist() == [*own.tolist(), 90, 91, 50, 51]
    assert prompts["t3"].tolist() == [*prompts["t2"].tolist(), 92, 60]
    seqs = true_sequences([first, second, third], outputs)
    assert seqs["t3"].tolist() == [*prompts["t3"].tolist(), 93]
    assert not seqs["t3"].flags.writeable


def test_bad_chains_and_tokens_are_errors() -> None:
    orphan = TraceRequest("x", 0.0, 1, prompt_token_ids=(3,), parent_request_id="nope")
    with pytest.raises(ValueError, match="not in the trace"):
        full_prompts([orphan], {})
    a = TraceRequest("a", 0.0, 1, prompt_token_ids=(3,), parent_request_id="b")
    b = TraceRequest("b", 0.0, 1, prompt_token_ids=(4,), parent_request_id="a")
    with pytest.raises(ValueError, match="cycle"):
        full_prompts([a, b], {})
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        check_vocab({"a": np.array([3, 12])}, 10)


def test_unrecorded_outputs_come_from_the_schedule() -> None:
    """A request still running when the run stopped has no outputs in outputs.json: its
    decode inputs past the known tokens extend it; known positions are never changed."""
    seq = {"r": np.array([10, 11], dtype=np.int64)}

    def step(i: int, computed: int, ids: list[int]) -> SchedulerOutput:
        req = ScheduledRequest("r", computed, len(ids), computed + len(ids), 2,
                               np.array(ids, dtype=np.int64), (0,))  # fmt: skip
        return SchedulerOutput(i, (req,))

    schedule = [step(0, 0, [10, 11]), step(1, 2, [77]), step(2, 0, [10, 99, 77, 78]),
                step(3, 4, [-1])]  # fmt: skip
    assert extend_from_schedule(seq, schedule)["r"].tolist() == [10, 11, 77, 78]
