"""Kernel replay through vLLM's whole engine (`verify --engine vllm-engine`) can fail.

Three requests share a 70-token prefix (two full blocks of 32 cached after the first);
with a budget of 32 every prompt is chunked and the later ones hit the prefix. The bundle
is recorded by the whole engine itself (shadow backend), then its arrivals run on vLLM's
CPU kernels twice, chunked + prefix-cached and unchunked + uncached:

- clean: the same schedule as recorded, every sampled logprob within the tolerance, and
  the logprobs spread (the re-drawn weights: not all -ln(vocab));
- vLLM's slot mapping shifted by one slot for the first row of every query that starts
  past position 0 with more than one token (a continuing chunk or a prefix hit; the
  unchunked baseline has none): misaligned, at a request and position.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.traces.schema import TraceRequest

pytestmark = pytest.mark.vllm_cpu

VOCAB = 32_000
CONFIG = EngineConfig(
    block_size=32, num_gpu_blocks=64, max_num_batched_tokens=32, max_num_seqs=4, max_model_len=512
)


def _trace() -> list[TraceRequest]:
    rng = np.random.default_rng(7)
    shared = rng.integers(3, VOCAB, 70).tolist()
    return [
        TraceRequest(
            request_id=f"r{i}",
            arrival_time_s=0.2 * i,
            output_length=8,
            prompt_token_ids=tuple(shared + rng.integers(3, VOCAB, 20 + 15 * i).tolist()),
        )
        for i in range(3)  # bounded: three requests
    ]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from schedcheck.sim.bundles import save_bundle
    from schedcheck.sim.loop import SimOptions, run

    result = run(_trace(), "vllm-engine", CONFIG, SimOptions(record_schedule=True))
    assert result.violations == [] and result.finished == 3
    return save_bundle(tmp_path_factory.mktemp("kernel") / "bundle", result)


def test_clean_kernel_replay_is_consistent_with_spread_logprobs(bundle: Path) -> None:
    from schedcheck.cli.commands.verify_vllm import verify_bundle_on_vllm

    report = verify_bundle_on_vllm(bundle)
    out = report.to_json()
    assert out["verdict"] == "consistent", out["first_divergence"]
    assert out["schedule_divergence"] is None  # vLLM ran the recorded schedule
    assert out["notes"] == []
    assert out["baseline_chunked_prompts"] == 0 and report.replay.chunked_prompts == 3
    assert out["samples_compared"] == 3 * 8 == out["samples"]["baseline"]
    assert out["max_logprob_error_within_tolerance"] < 1e-5  # measured: ~1e-6
    forced = [s.forced_logprob for s in report.baseline.samples.values()]
    greedy = [s.top_logprobs[0] for s in report.baseline.samples.values()]
    assert np.std(forced) > 0.5, forced  # dummy weights: all -ln(vocab), std 0
    assert min(greedy) > -math.log(VOCAB) + 2, greedy


def test_a_one_slot_shift_in_vllms_runner_is_misaligned(bundle: Path, monkeypatch) -> None:
    from vllm.v1.worker import block_table

    from schedcheck.cli.commands.verify_vllm import verify_bundle_on_vllm

    original = block_table.BlockTable.compute_slot_mapping

    def shifted(self, num_reqs, query_start_loc, positions):  # type: ignore[no-untyped-def]
        original(self, num_reqs, query_start_loc, positions)
        starts = query_start_loc[: num_reqs + 1].tolist()
        for lo, hi in itertools.pairwise(starts):  # bounded: the batch
            if hi - lo > 1 and int(positions[lo]) > 0:  # a chunk that continues a request
                self.slot_mapping.gpu[lo] -= 1

    monkeypatch.setattr(block_table.BlockTable, "compute_slot_mapping", shifted)
    report = verify_bundle_on_vllm(bundle)
    out = report.to_json()
    assert out["verdict"] == "misaligned"
    assert report.exit_code == 1
    first = out["first_divergence"]
    assert first, out
    rid, finding = min(first.items(), key=lambda kv: kv[1]["step"])
    assert finding["cls"] == "misalignment" and finding["kind"] in ("logprob", "token")
    assert finding["error"] > 100 * out["tolerance"]["logprob_atol"]
    assert (rid, finding["position"]) == PINNED_FIRST, (rid, finding)


PINNED_FIRST = ("r0", 90)  # r0's first sample (its prompt: 90 tokens, chunks of 32)


def test_verify_cli_runs_the_kernel_replay(bundle: Path, capsys) -> None:
    from schedcheck.cli.entry import main

    code = main(["verify", "--engine", "vllm-engine", str(bundle), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert (code, out["verdict"], out["schedule_divergence"]) == (0, "consistent", None)
    assert out["block_size"] == 32 and out["samples_compared"] == 24
