"""Hand-built schedules (SchedulerOutputs constructed directly) with known verdicts.

Pure data (numpy + engines types), used by the tests and by the nightly job as a corpus
that exists before any simulator bundle does. Token layout of `prefix-chunked` (bs =
block size; A and B share A's first two blocks, B joins a step after A wrote them)::

    A  prompt 3bs+2, 3 outputs   blocks (0, 1, 2, 3)
    B  prompt A[:2bs] + bs+1 own  blocks (0, 1, 5, 6)   cached 2bs
    C  prompt bs-1, 4 outputs     blocks (4, 7)

    step 0: A [0, 2bs) chunk          C [0, bs-1) -> C0
    step 1: A [2bs, 3bs+2) -> A0      C decode -> C1     B [2bs, 3bs+1) -> B0
    step 2: A decode -> A1            C decode -> C2     B decode -> B1 (B done)
    step 3: A decode -> A2            C decode -> C3

`preempt` adds recompute preemption: D is preempted after two outputs, E reuses its
blocks, D re-prefills prompt + outputs into new blocks. Each misaligned variant names the
first divergence it must produce: request -> (kind, step, position).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.traces.bundle import write_bundle
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE, FIRST_TOKEN_ID

Expected = dict[str, tuple[str, int, int]]  # request id -> (kind, step, position)


@dataclass(frozen=True)
class Scenario:
    name: str
    block_size: int
    prompts: dict[str, np.ndarray]
    outputs: dict[str, list[int]]
    schedule: tuple[SchedulerOutput, ...]
    expected: Expected = field(default_factory=dict)  # empty: consistent
    mutant: str | None = None  # a runner-metadata mutant of engines/metadata.py
    num_gpu_blocks: int = 64

    def sequences(self) -> dict[str, np.ndarray]:
        return {
            r: np.concatenate([p, np.asarray(self.outputs[r], np.int64)])
            for r, p in self.prompts.items()
        }


def _tokens(rng: np.random.Generator, n: int, vocab_size: int) -> np.ndarray:
    return rng.integers(FIRST_TOKEN_ID, vocab_size, size=n, dtype=np.int64)


def _sched(
    seq: np.ndarray,
    rid: str,
    computed: int,
    scheduled: int,
    num_prompt: int,
    blocks: Sequence[int],
    bs: int,
    num_cached: int = 0,
) -> ScheduledRequest:
    """The share of one request; num_tokens = computed + scheduled (it samples)."""
    end = computed + scheduled
    needed = -(-end // bs)
    assert len(blocks) >= needed, f"{rid}: {len(blocks)} blocks for {end} tokens"
    chunk = seq[computed:end].copy()
    chunk.flags.writeable = False
    return ScheduledRequest(
        rid,
        computed,
        scheduled,
        max(end, num_prompt),
        num_prompt,
        chunk,
        tuple(blocks[:needed]),
        num_cached,
    )


def prefix_chunked(
    block_size: int = 16, seed: int = 0, vocab_size: int = DEFAULT_VOCAB_SIZE
) -> Scenario:
    bs = block_size
    assert bs >= 4
    rng = np.random.default_rng(seed)
    a = _tokens(rng, 3 * bs + 2, vocab_size)
    prompts = {
        "A": a,
        "B": np.concatenate([a[: 2 * bs], _tokens(rng, bs + 1, vocab_size)]),
        "C": _tokens(rng, bs - 1, vocab_size),
    }
    outputs = {
        "A": _tokens(rng, 3, vocab_size).tolist(),
        "B": _tokens(rng, 2, vocab_size).tolist(),
        "C": _tokens(rng, 4, vocab_size).tolist(),
    }
    seq = {r: np.concatenate([prompts[r], np.asarray(outputs[r], np.int64)]) for r in prompts}
    blocks = {"A": (0, 1, 2, 3), "B": (0, 1, 5, 6), "C": (4, 7)}
    n = {r: p.size for r, p in prompts.items()}

    def s(rid: str, computed: int, scheduled: int, cached: int = 0) -> ScheduledRequest:
        return _sched(seq[rid], rid, computed, scheduled, n[rid], blocks[rid], bs, cached)

    a_n, b_n, c_n = n["A"], n["B"], n["C"]
    steps = (
        SchedulerOutput(0, (s("A", 0, 2 * bs), s("C", 0, c_n))),
        SchedulerOutput(
            1,
            (
                s("A", 2 * bs, a_n - 2 * bs),
                s("C", c_n, 1),
                s("B", 2 * bs, b_n - 2 * bs, cached=2 * bs),
            ),
        ),
        SchedulerOutput(2, (s("A", a_n, 1), s("C", c_n + 1, 1), s("B", b_n, 1))),
        SchedulerOutput(3, (s("A", a_n + 1, 1), s("C", c_n + 2, 1)), finished_req_ids=("B",)),
    )
    return Scenario("prefix-chunked", bs, prompts, outputs, steps)


def preempt(block_size: int = 16, seed: int = 1, vocab_size: int = DEFAULT_VOCAB_SIZE) -> Scenario:
    bs = block_size
    rng = np.random.default_rng(seed)
    prompts = {"D": _tokens(rng, 2 * bs + 3, vocab_size), "E": _tokens(rng, bs + 2, vocab_size)}
    outputs = {"D": _tokens(rng, 4, vocab_size).tolist(), "E": _tokens(rng, 1, vocab_size).tolist()}
    seq = {r: np.concatenate([prompts[r], np.asarray(outputs[r], np.int64)]) for r in prompts}
    d_n, e_n = prompts["D"].size, prompts["E"].size
    d_old, d_new, e_blocks = (0, 1, 2), (3, 4, 5, 6), (0, 1)

    def s(rid: str, computed: int, scheduled: int, blocks: Sequence[int]) -> ScheduledRequest:
        return _sched(seq[rid], rid, computed, scheduled, prompts[rid].size, blocks, bs)

    steps = (
        SchedulerOutput(0, (s("D", 0, d_n, d_old),)),
        SchedulerOutput(1, (s("D", d_n, 1, d_old),)),
        SchedulerOutput(2, (s("E", 0, e_n, e_blocks),), preempted_req_ids=("D",)),
        SchedulerOutput(3, (s("D", 0, d_n + 2, d_new),), finished_req_ids=("E",)),
        SchedulerOutput(4, (s("D", d_n + 2, 1, d_new),)),
    )
    return Scenario("preempt", bs, prompts, outputs, steps)


def joined(block_size: int = 16) -> Scenario:
    """`preempt`'s prompts without the preemption: E's whole prompt runs in step 1 beside
    D's first decode (a request at position 0 beside one with KV from before the step)."""
    pre = preempt(block_size)
    bs = block_size
    seq = pre.sequences()
    d_n, e_n = pre.prompts["D"].size, pre.prompts["E"].size

    def s(rid: str, computed: int, scheduled: int, blocks: Sequence[int]) -> ScheduledRequest:
        return _sched(seq[rid], rid, computed, scheduled, pre.prompts[rid].size, blocks, bs)

    d_blocks, e_blocks = (0, 1, 2, 5), (3, 4)
    steps = (
        SchedulerOutput(0, (s("D", 0, d_n, d_blocks),)),
        SchedulerOutput(1, (s("D", d_n, 1, d_blocks), s("E", 0, e_n, e_blocks))),
        SchedulerOutput(2, (s("D", d_n + 1, 1, d_blocks),), finished_req_ids=("E",)),
        SchedulerOutput(3, (s("D", d_n + 2, 1, d_blocks),)),
    )
    return replace(pre, name="joined", schedule=steps)


def _edit(
    scenario: Scenario,
    name: str,
    step: int,
    rid: str,
    change: Callable[[ScheduledRequest], ScheduledRequest],
    expected: Expected,
    steps: Sequence[int] | None = None,
) -> Scenario:
    """A copy where `change` rewrites `rid`'s share of `step` (or of each of `steps`)."""
    targets = set(steps) if steps is not None else {step}
    schedule = tuple(
        replace(
            out, scheduled=tuple(change(r) if r.request_id == rid else r for r in out.scheduled)
        )
        if out.step in targets
        else out
        for out in scenario.schedule
    )
    return replace(scenario, name=name, schedule=schedule, expected=expected)


def misaligned(block_size: int = 16) -> list[Scenario]:
    """Every misaligned variant, each with the first divergence it must produce."""
    bs = block_size
    base, pre = prefix_chunked(bs), preempt(bs)
    d_n = pre.prompts["D"].size
    stale = _edit(
        base,
        "stale-block",
        1,
        "B",
        lambda r: replace(r, block_table=(0, 2, 5, 6)),
        {"B": ("kv-read", 1, bs)},
        steps=(1, 2),
    )
    out_of_range = _edit(
        base,
        "block-out-of-range",
        1,
        "A",
        lambda r: replace(r, block_table=(*r.block_table[:3], 999)),
        {"A": ("slot-invalid", 1, 3 * bs)},
        steps=(1, 2, 3),
    )

    def wrong_token(r: ScheduledRequest) -> ScheduledRequest:
        ids = r.token_ids.copy()
        ids[-1] = FIRST_TOKEN_ID if ids[-1] != FIRST_TOKEN_ID else FIRST_TOKEN_ID + 1
        ids.flags.writeable = False
        return replace(r, token_ids=ids)

    wrong = _edit(
        pre, "reprefill-wrong-token", 3, "D", wrong_token, {"D": ("input-token", 3, d_n + 1)}
    )

    def resume_stale(r: ScheduledRequest) -> ScheduledRequest:
        seq = pre.sequences()["D"]
        return _sched(seq, "D", 2 * bs, d_n + 2 - 2 * bs, d_n, (0, 1, 2, 6), bs)

    resume = _edit(pre, "preempt-stale-blocks", 3, "D", resume_stale, {"D": ("kv-read", 3, 0)})
    from_zero = replace(
        base,
        name="slot-mapping-from-zero",
        mutant="slot-mapping-from-zero",
        expected={"A": ("kv-read", 1, 0), "B": ("kv-read", 1, 0), "C": ("kv-read", 1, 0)},
    )
    full_prompt = replace(
        base,
        name="seq-len-full-prompt",
        mutant="seq-len-full-prompt",
        expected={
            "A": ("causal-alignment", 0, 0),
            # B reads A's layer-1 K of the shared blocks, which A
            # computed while attending to keys it must not see
            "B": ("kv-read", 1, 0),
        },
    )
    hits_only = replace(
        joined(bs),
        name="block-table-hits-only",
        mutant="block-table-hits-only",
        expected={"E": ("kv-read", 1, 0)},  # through the zeros table: D's key 0 in block 0
    )
    return [stale, out_of_range, wrong, resume, from_zero, full_prompt, hits_only]


def clean(block_size: int = 16) -> list[Scenario]:
    return [prefix_chunked(block_size), preempt(block_size), joined(block_size)]


def write_scenario_bundle(scenario: Scenario, path: str | Path) -> Path:
    """Write `scenario` as a bundle (traces/bundle.py) that `schedcheck verify` reads."""
    trace = [
        json.dumps(
            {
                "request_id": rid,
                "arrival_time_s": 0.0,
                "output_length": len(scenario.outputs[rid]),
                "prompt_token_ids": p.tolist(),
            }
        )
        for rid, p in scenario.prompts.items()
    ]
    config = {
        "engine": "hand-built",
        "scenario": scenario.name,
        "seed": 0,
        "mutant": scenario.mutant,
        "executor": "none",
        "engine_config": {
            "block_size": scenario.block_size,
            "num_gpu_blocks": scenario.num_gpu_blocks,
        },
    }
    expected = [
        {"request_id": r, "invariant": kind, "step": step, "position": pos}
        for r, (kind, step, pos) in sorted(scenario.expected.items())
    ]
    return write_bundle(
        path,
        trace_lines=trace,
        config=config,
        schedule=scenario.schedule,
        outputs=scenario.outputs,
        violations=expected,
        summary={"steps": len(scenario.schedule), "requests": len(scenario.prompts)},
        command=f"gpu.scenarios {scenario.name} block_size={scenario.block_size}",
    )
