"""Simulator bundles of mutant runs: the tensor replay names, for every request the symbolic
(shadow-KV) executor flagged, the same step and position as the symbolic executor."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.gpu.compare import VerifyOptions, verify_bundle
from schedcheck.gpu.model import make_model
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.cost_model import StepCostModel
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest


def _trace() -> list[TraceRequest]:
    rng = np.random.default_rng(0)
    shared = rng.integers(3, 32_000, 12).tolist()
    out = []
    for i, own in enumerate((3, 8, 5, 9)):
        prompt = tuple(shared + rng.integers(3, 32_000, own).tolist())
        out.append(TraceRequest(f"r{i}", 0.002 * i, 3, prompt_token_ids=prompt))
    return out


@pytest.fixture(scope="module")
def model():
    return make_model(seed=0)


@pytest.mark.parametrize(
    ("mutant", "num_lookahead_tokens"),
    [
        (None, 0),
        ("slot-mapping-from-zero", 0),
        ("seq-len-full-prompt", 0),
        ("block-table-short", 0),
        (None, 3),  # speculative decoding: draft KV written past every sampled token
        ("no-lookahead-slots", 3),
    ],
)
def test_first_divergence_matches_the_shadow_kv(
    model, mutant: str | None, num_lookahead_tokens: int
) -> None:
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=8,
                          max_num_seqs=4, mutant=mutant,
                          num_lookahead_tokens=num_lookahead_tokens)  # fmt: skip
    result = run(_trace(), "reference", config,
                 SimOptions(seed=0, record_schedule=True, keep_going=True))  # fmt: skip
    bundle = save_bundle(tempfile.mkdtemp(prefix="vs-symbolic-"), result)
    report = verify_bundle(bundle, VerifyOptions(), model=model)
    symbolic: dict[str, tuple[int, int]] = {}
    for v in result.violations:
        if v.invariant.startswith("shadow-kv"):
            symbolic.setdefault(v.request_id, (v.step, v.position))
    ours = {r: (f.step, f.position) for r, f in report.first_divergence().items()}
    if mutant is None:
        assert symbolic == {} and report.verdict == "consistent"
        return
    assert symbolic and report.verdict == "misaligned"
    assert {r: ours.get(r) for r in symbolic} == symbolic


def _verify_run(model, trace, config: EngineConfig, options: SimOptions, cost=None):
    result = run(trace, "reference", config, options, cost)
    bundle = save_bundle(tempfile.mkdtemp(prefix="vs-symbolic-"), result)
    return result, verify_bundle(bundle, VerifyOptions(), model=model)


@pytest.mark.parametrize(
    ("mutant", "expected"),
    [
        (None, {}),
        # the rollback after r0's step 2 (drafts at 16 17 18, none accepted) stops one short:
        # step 3 starts at 17 and reads key 16, still the first rejected draft's KV (slot
        # 5*4+0); the symbolic run stops at accounting.manager-agreement first
        ("spec-rollback-off-by-one", {"r0": ("kv-read", 3, 16, 20, 0)}),
    ],
)
def test_scheduled_drafts_replay_as_the_sampler_accepted_them(model, mutant, expected) -> None:
    """Drafts of 3 tokens, about half accepted: rejected draft rows are no finding."""
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=8,
                          max_num_seqs=4, mutant=mutant, num_speculative_tokens=3)  # fmt: skip
    options = SimOptions(seed=0, record_schedule=True, keep_going=True, draft_acceptance=0.5)
    result, report = _verify_run(model, _trace(), config, options)
    assert result.coverage["spec-rejected"] == (7 if mutant is None else 1)
    found = {r: (f.kind, f.step, f.position, f.slot, f.layer) for r, f in
             report.first_divergence().items()}  # fmt: skip
    assert found == expected
    assert report.verdict == ("consistent" if mutant is None else "misaligned")


# `schedcheck fuzz --mutant stale-cache-hit --block-manager hashed --seed 5 --no-db`: its
# shrunk bundle's requests and configuration (drafts of 5 tokens and 1 lookahead token)
STALE_HIT_TRACE = [
    TraceRequest("r0", 0.0, 8, prompt_token_ids=(1000,)),
    TraceRequest("r3", 0.035, 6, prompt_token_ids=tuple(range(4000, 4011))),
    TraceRequest("r5", 0.035, 1, prompt_token_ids=(1000, *range(6000, 6018))),
]
STALE_HIT_CONFIG = EngineConfig(
    block_size=2, num_gpu_blocks=13, max_num_batched_tokens=6, max_num_seqs=256,
    max_model_len=131072, long_prefill_token_threshold=0, num_lookahead_tokens=1,
    num_speculative_tokens=5, block_manager="hashed", mutant="stale-cache-hit",
    extra={"chunk_align": "deterministic", "policy": "priority"},
)  # fmt: skip
STALE_HIT_OPTIONS = SimOptions(seed=0, record_schedule=True, draft_acceptance=0.7,
                               faults={"evict": 0.02, "preempt": 0.25})  # fmt: skip


def test_fuzzed_stale_cache_hit_with_drafts_names_the_shadow_kvs_read(model) -> None:
    """r0's and r3's rejected drafts were input-token findings (r0 step 1 position 4); the
    replay now names only the stale read the shadow KV found: r5's key 4 at step 11, in
    slot 6*2+0, where r3's drafter wrote the KV of its position 20 at step 10."""
    cost = StepCostModel("unit", 10_000.0, 0.0, 0.0, 0.0)
    result, report = _verify_run(model, STALE_HIT_TRACE, STALE_HIT_CONFIG, STALE_HIT_OPTIONS, cost)
    [violation] = result.violations
    assert (violation.invariant, violation.request_id, violation.step, violation.position) == (
        "shadow-kv.read", "r5", 11, 4
    )  # fmt: skip
    assert result.coverage["spec-rejected"] == 3
    assert not [f for f in report.findings if f.kind in ("input-token", "position-beyond-tokens")]
    found = {r: (f.kind, f.step, f.position, f.slot, f.layer) for r, f in
             report.first_divergence().items()}  # fmt: skip
    assert found == {"r5": ("kv-read", 11, 4, 12, 0)}
