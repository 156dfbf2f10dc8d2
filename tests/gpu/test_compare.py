"""Bundles of hand-built schedules: clean ones verify consistent, misaligned ones are
classified `misalignment` at the request, step and position their construction implies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.gpu import scenarios
from schedcheck.gpu.compare import VerifyOptions, verify_bundle
from schedcheck.gpu.findings import MISALIGNMENT
from schedcheck.gpu.model import ModelConfig, make_model

BS = 4
CFG = ModelConfig(vocab_size=32_000)


@pytest.fixture(scope="module")
def model():
    return make_model(CFG, seed=0)


def _verify(tmp_path: Path, scenario: scenarios.Scenario, model, **opts):
    bundle = scenarios.write_scenario_bundle(scenario, tmp_path / scenario.name)
    return verify_bundle(bundle, VerifyOptions(**opts), model=model)


def _first(report) -> dict[str, tuple[str, int, int]]:
    return {r: (f.kind, f.step, f.position) for r, f in report.first_divergence().items()}


@pytest.mark.parametrize("scenario", scenarios.clean(BS), ids=lambda s: s.name)
def test_clean_schedules_are_consistent(tmp_path: Path, model, scenario) -> None:
    report = _verify(tmp_path, scenario, model)
    assert report.verdict == "consistent", report.to_json()["divergences"]
    assert report.exit_code == 0
    assert report.sampled == sum(len(o) for o in scenario.outputs.values())
    assert 0 < report.max_kv_error < 1e-4


@pytest.mark.parametrize("scenario", scenarios.misaligned(BS), ids=lambda s: s.name)
def test_misaligned_schedules_name_request_and_position(tmp_path: Path, model, scenario) -> None:
    report = _verify(tmp_path, scenario, model)
    assert report.verdict == "misaligned" and report.exit_code == 1
    assert _first(report) == scenario.expected
    assert all(f.cls == MISALIGNMENT for f in report.first_divergence().values())
    matched = report.to_json()["violations_matched"]
    assert matched and all(m["same_position"] for m in matched)


def _shift_slots(rid: str, step: int):
    """Row p of `rid` writes the slot of p + 1 at `step` (an off-by-one slot mapping)."""

    def transform(md: RunnerMetadata) -> RunnerMetadata:
        if md.output.step != step:
            return md
        i = md.req_ids.index(rid)
        slots = md.slot_mapping.copy()
        slots[md.query_start_loc[i] : md.query_start_loc[i + 1]] += 1
        return replace(md, slot_mapping=slots)

    return transform


def _longer_seq_len(rid: str, step: int):
    def transform(md: RunnerMetadata) -> RunnerMetadata:
        if md.output.step != step:
            return md
        seq_lens = md.seq_lens.copy()
        seq_lens[md.req_ids.index(rid)] += 1
        return replace(md, seq_lens=seq_lens)

    return transform


def test_slot_mapping_shifted_by_one(tmp_path: Path, model) -> None:
    scenario = scenarios.prefix_chunked(BS)
    report = _verify(tmp_path, scenario, model, transform=_shift_slots("A", 1))
    first = report.first_divergence()["A"]
    # A's row at position 2*BS wrote the slot of 2*BS+1: the key read at 2*BS is unwritten
    assert (first.kind, first.step, first.position) == ("kv-read", 1, 2 * BS)
    assert (first.slot, first.block) == (2 * BS, 2)
    assert report.verdict == "misaligned"


def test_decode_seq_len_one_too_long(tmp_path: Path, model) -> None:
    scenario = scenarios.prefix_chunked(BS)
    report = _verify(tmp_path, scenario, model, transform=_longer_seq_len("C", 2))
    c_n = scenario.prompts["C"].size
    # C decodes position c_n + 1 at step 2 with a window one key too wide ...
    assert _first(report)["C"] == ("causal-alignment", 2, c_n + 1)
    assert set(_first(report)) == {"C"}
    # ... and the numbers show it: key c_n + 2 (layer 0) is read, and not written yet
    reads = [f for f in report.findings if f.kind == "kv-read" and f.layer == 0]
    assert [(f.step, f.position) for f in reads] == [(2, c_n + 2)]


def test_recorded_outputs_that_are_not_the_models_are_fine(tmp_path: Path, model) -> None:
    """Teacher forcing: outputs.json holds another model's tokens (the hash model's)."""
    scenario = scenarios.prefix_chunked(BS, seed=5)
    assert not np.array_equal(scenario.outputs["A"], scenarios.prefix_chunked(BS).outputs["A"])
    assert _verify(tmp_path, scenario, model).verdict == "consistent"


def test_recorder_keeps_logits_and_kv_per_request_and_position(model) -> None:
    from schedcheck.gpu.backends.torch_ref import TorchRefBackend
    from schedcheck.gpu.executor import TensorExecutor
    from schedcheck.gpu.replay import Recorder, replay_schedule

    scenario = scenarios.prefix_chunked(BS)
    recorder = Recorder()
    executor = TensorExecutor(model, TorchRefBackend(), BS, 64, observer=recorder)
    executor.set_true_tokens(scenario.sequences())
    stats = replay_schedule(scenario.schedule, executor, BS)
    assert len(recorder.samples) == stats.sampled == 9
    # B's first 2*BS positions came from the prefix cache: B never wrote them
    assert ("B", 0) not in recorder.kv and ("B", 2 * BS) in recorder.kv
    assert ("A", 0) in recorder.kv and len(recorder.kv[("A", 0)]) == 1
    step, k, v = recorder.kv[("A", 0)][0]
    assert v.shape == k.shape
    assert step == 0 and k.shape == (CFG.num_layers, CFG.num_kv_heads, CFG.head_dim)
    logits = recorder.samples[(1, "A", scenario.prompts["A"].size - 1)]
    assert logits.shape == (CFG.vocab_size,)
