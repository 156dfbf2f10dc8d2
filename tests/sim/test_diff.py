"""Differential replay: where two engines' schedules part, and outputs that must not."""

import json
import subprocess
import sys

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.diff import compare
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

TRACE = [TraceRequest(f"r{i}", 0.0, 3, prompt_token_ids=tuple(range(3, 30))) for i in range(3)]
REC = SimOptions(record_schedule=True)


def _run(budget):
    cfg = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=budget)
    return run(TRACE, "reference", cfg, REC, profile("unit"))


def test_different_budgets_schedule_differently_with_the_same_outputs():
    report = compare(("small", "large"), _run(8), _run(64))
    assert report.violations == [] and report.exit_code == 0
    first = report.schedule_differences[0]
    assert first["request_id"] == "r0" and first["index"] == 0
    assert (first["a"]["num_scheduled_tokens"], first["b"]["num_scheduled_tokens"]) == (8, 27)


def test_different_outputs_are_a_violation():
    a, b = _run(64), _run(64)
    b.outputs["r1"] = [*b.outputs["r1"][:2], 7]
    report = compare(("a", "b"), a, b)
    assert [(v.invariant, v.request_id) for v in report.violations] == [("diff.outputs", "r1")]
    assert report.exit_code == 1


def test_diff_cli_json():
    proc = subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", "diff", "--engines", "reference,reference",
         "--block-managers", "hashed,radix", "--max-requests", "5", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["violations"] == [] and [r["block_manager"] for r in out["runs"]] == [
        "hashed",
        "radix",
    ]
