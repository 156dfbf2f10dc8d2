"""A forced near tie: the top-2 logits of one sampled position are crafted to differ by
1e-4 with opposite signs in the baseline and the replay (whose hidden states differ only
by reduction order), so the greedy tokens differ; it must be classified `near-tie`."""

from __future__ import annotations

from pathlib import Path

import torch

from schedcheck.gpu import scenarios
from schedcheck.gpu.backends.torch_ref import TorchRefBackend
from schedcheck.gpu.baseline import run_baseline
from schedcheck.gpu.compare import VerifyOptions, verify_bundle
from schedcheck.gpu.executor import TensorExecutor
from schedcheck.gpu.findings import NEAR_TIE
from schedcheck.gpu.model import ModelConfig, make_model
from schedcheck.gpu.replay import replay_schedule
from schedcheck.gpu.tolerances import Tolerance, tolerance_for

BS, EPS = 4, 1e-4
CFG = ModelConfig()


class _Hidden:
    """Observer: the replay's final hidden state at every sampled (step, request, position)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, int, torch.Tensor]] = []

    def on_step(self, plan, tensors, written, hidden, logits, tokens, executor) -> None:
        md = plan.metadata
        for n, (rid, row) in enumerate(
            zip(md.sampling_req_ids, md.logits_indices.tolist(), strict=True)
        ):
            self.rows.append((plan.step, rid, int(md.positions[row]), hidden[n].double()))


def _crafted_head(scenario):
    """Weights with a near tie at the first sample whose hidden states differ at all."""
    model = make_model(CFG, seed=0)
    backend = TorchRefBackend()
    base = run_baseline(model, backend, scenario.sequences())
    seen = _Hidden()
    executor = TensorExecutor(model, backend, BS, scenario.num_gpu_blocks, observer=seen)
    executor.set_true_tokens(scenario.sequences())
    replay_schedule(scenario.schedule, executor, BS)
    for row in seen.rows:
        step, rid, pos, h_s = row
        h_b = base.hidden[base.offsets[rid] + pos].double()
        if (h_s - h_b).abs().max() > 0:
            break
    else:
        raise AssertionError("every sampled hidden state is bitwise equal: no reduction noise")
    d = h_s - h_b
    head = model.head64.clone()
    a = int((head @ h_b).argmax())
    # delta = c0 * h_b + c1 * d with delta.h_b = -EPS and delta.h_s = +EPS
    gram = torch.tensor([[h_b @ h_b, d @ h_b], [h_b @ h_s, d @ h_s]], dtype=torch.float64)
    c = torch.linalg.solve(gram, torch.tensor([-EPS, EPS], dtype=torch.float64))
    b = (a + 1) % CFG.vocab_size
    head[b] = head[a] + c[0] * h_b + c[1] * d
    assert (head[b] - head[a]) @ h_b < 0 < (head[b] - head[a]) @ h_s
    return head, (step, rid, pos), (a, b)


def test_forced_near_tie_is_classified_near_tie(tmp_path: Path) -> None:
    scenario = scenarios.prefix_chunked(BS)
    head, where, (a, b) = _crafted_head(scenario)
    bundle = scenarios.write_scenario_bundle(scenario, tmp_path / "tie")

    def hook(model) -> None:
        model.set_weight("lm_head.weight", head)

    report = verify_bundle(bundle, VerifyOptions(model_hook=hook))
    assert report.verdict == "near-tie" and report.exit_code == 0
    [finding] = report.findings
    assert (finding.kind, finding.cls) == ("token", NEAR_TIE)
    assert (finding.step, finding.request_id, finding.position) == where
    assert f"token {b} instead of {a}" in finding.message

    strict = tolerance_for("fp32")
    no_ties = Tolerance(strict.kv_atol, strict.kv_rtol, strict.logprob_atol, tie_margin=0.0)
    report = verify_bundle(bundle, VerifyOptions(model_hook=hook, tolerance=no_ties))
    assert report.verdict == "misaligned"  # the same flip, with no room for ties
