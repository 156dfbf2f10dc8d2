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
