"""The whole engine sees vLLM's runner: four real bug classes and a control (runner_bugs.py).

Each bug of vLLM's history, planted in vLLM 0.32's runner (one part each: BlockTable's
slot mapping, `_prepare_inputs`' sequence lengths, `_prepare_inputs`' logits indices, the
persistent batch's condense), is
- found by the shadow backend: the loop on three requests sharing a 70-token prefix
  (chunks of 32, prefix hits), checked on vLLM's own metadata;
- called misaligned by the kernel replay (vLLM's CPU_ATTN kernels, chunked + cached vs
  each request alone, unchunked) of the same requests' bundle, recorded clean;
while the control (a runner change that changes no index) is clean in both.

The fuzz campaigns (`fuzz --engine runner_bugs:make_engine`, the bug named by
$SCHEDCHECK_VLLM_RUNNER_BUG) are marked slow: each finds its bug within 60 s (condense,
which needs two requests running at once, in 27.8 s; the others in 2-4 s), shrinks it to
at most 4 requests, and the kernel replay calls the shrunk bundle misaligned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import runner_bugs

from schedcheck.engines.protocol import EngineConfig
from schedcheck.traces.schema import TraceRequest

pytestmark = pytest.mark.vllm_cpu

HERE = Path(__file__).parent
MEASURED = "runner-bug-campaign:"  # the slow tests print their numbers after this
VOCAB = 32_000
CONFIG = EngineConfig(
    block_size=32, num_gpu_blocks=64, max_num_batched_tokens=32, max_num_seqs=4, max_model_len=512
)
BUGS = ("slot-mapping", "seq-lens", "logits-index", "condense")
# what the shadow KV reports first, per bug (kind, request, what)
SHADOW_FIRST = {
    "slot-mapping": ("shadow-kv.runner-metadata-disagrees", "r0", "slot_mapping"),
    "seq-lens": ("shadow-kv.runner-metadata-disagrees", "r0", "seq_lens"),
    "logits-index": ("shadow-kv.runner-metadata-disagrees", "r0", "logits_indices"),
    "condense": ("shadow-kv.runner-metadata-disagrees", "r2", "slot_mapping"),
}


def _trace() -> list[TraceRequest]:
    rng = np.random.default_rng(7)
    shared = rng.integers(3, VOCAB, 70).tolist()
    return [
        TraceRequest(
            request_id=f"r{i}",
            arrival_time_s=0.001 * i,  # all three running at once
            output_length=4 if i == 0 else 12,  # r0 leaves row 0 first: condense moves r2
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
    return save_bundle(tmp_path_factory.mktemp("bugs") / "bundle", result)


@pytest.fixture
def planted(request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.param
    runner_bugs.apply(name)
    try:
        yield name
    finally:
        runner_bugs.revert()


@pytest.mark.parametrize("planted", [*BUGS, "control"], indirect=True)
def test_shadow_backend_and_kernel_replay_see_the_runner(planted: str, bundle: Path) -> None:
    from schedcheck.cli.commands.verify_vllm import verify_bundle_on_vllm
    from schedcheck.sim.loop import SimOptions, run

    shadow = run(_trace(), "vllm-engine", CONFIG, SimOptions(keep_going=True))
    kernels = verify_bundle_on_vllm(bundle).to_json()
    if planted == "control":
        assert shadow.violations == [], shadow.violations[:3]
        assert kernels["verdict"] == "consistent", kernels["first_divergence"]
        return
    assert shadow.violations, f"{planted}: unseen by the shadow backend"
    first = shadow.violations[0]
    kind, rid, what = SHADOW_FIRST[planted]
    assert (first.invariant, first.request_id) == (kind, rid), first
    assert what in first.message, first.message
    assert kernels["verdict"] == "misaligned", f"{planted}: the kernels agree"
    assert kernels["first_divergence"], kernels


def campaign(name: str, out: Path, budget_s: float = 60.0) -> dict:
    """`schedcheck fuzz` with runner bug `name` planted (a fresh process), its report."""
    env = {**os.environ, runner_bugs.ENV: name}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "schedcheck.cli", "fuzz", "--engine"]
    cmd += ["runner_bugs:make_engine", "--budget-s", str(budget_s), "--seed", "0", "--no-db"]
    cmd += ["--out", str(out), "--json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    report: dict = json.loads(done.stdout)
    return report


@pytest.mark.slow
@pytest.mark.parametrize("name", BUGS)
def test_fuzz_finds_each_runner_bug_and_the_kernels_agree(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from schedcheck.cli.commands.verify_vllm import verify_bundle_on_vllm

    report = campaign(name, tmp_path / "fuzz")
    assert report["found"], report.get("headline")
    assert report["time_to_detect_s"] < 60, report["time_to_detect_s"]
    assert report["shrunk_requests"] <= 4
    runner_bugs.apply(name)
    try:
        kernels = verify_bundle_on_vllm(report["bundle"]).to_json()
    finally:
        runner_bugs.revert()
    first = kernels["first_divergence"]
    fuzz = ("time_to_detect_s", "elapsed_s", "examples", "headline", "shrunk_requests")
    measured = {"bug": name, "upstream": runner_bugs.UPSTREAM[name]}
    measured |= {k: report[k] for k in fuzz}
    measured |= {k: kernels[k] for k in ("verdict", "notes", "schedule_divergence")}
    measured["first"] = {r: (f["step"], f["position"], f["kind"]) for r, f in first.items()}
    print(MEASURED, json.dumps(measured))
    assert kernels["verdict"] == "misaligned", kernels


@pytest.mark.slow
def test_fuzz_control_is_clean(tmp_path: Path) -> None:
    report = campaign("control", tmp_path / "fuzz")
    print(MEASURED, json.dumps({"bug": "control", "examples": report["examples"],
        "elapsed_s": report["elapsed_s"], "found": report["found"]}))  # fmt: skip
    assert not report["found"], report.get("headline")
