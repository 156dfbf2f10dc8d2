"""SGLang 0.5.23 (tox -e sglang): F8 of docs/sglang.md, an SGLang bug the harness must keep
reporting, and the standalone reproductions of tests/sglang/repro/.

With the radix cache and chunked prefill off, `PrefillAdder.add_one_req_ignore_eos` (the
path every request of ours takes then: the protocol runs each to its max_tokens, so the
adapter sets ignore_eos) admits a whole request without comparing its input with what is
left of max_prefill_tokens; only `budget_state()` stops the batch after it. The other path
(`_select_prefill_admission`) refuses a later request whose input reaches the remaining
budget. The fitter caps max_model_len at the budget with chunked prefill off, so SGLang's
documented bound (the maximum of max_prefill_tokens and the context length) is the budget.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_driver import SGLANG_0_5_23, config

from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

pytestmark = SGLANG_0_5_23

REPRO = Path(__file__).parent / "repro"

# the shrunk finding of `fuzz --engine sglang --seed 0 --budget-s 120
# --continue-past-findings --no-db` (campaign 1): 4 + 1 + 12 prompt tokens at once
F8_TRACE = [
    TraceRequest("r0", 0.005, 1, prompt_token_ids=(1000, 1001, 1002, 1003)),
    TraceRequest("r1", 0.005, 1, prompt_token_ids=(2000,)),
    TraceRequest("r2", 0.005, 1, prompt_token_ids=tuple(range(3000, 3012))),
]
F8_CONFIG = config(
    block_size=4,
    num_gpu_blocks=11,
    max_num_batched_tokens=16,
    max_num_seqs=16,
    max_model_len=16,  # what the fitter sets with chunked prefill off
    enable_chunked_prefill=False,
    enable_prefix_caching=False,
)


def _first_step(result) -> list[tuple[str, int]]:
    return [(r.request_id, r.num_scheduled_tokens) for r in result.schedule[0].scheduled]


def test_the_ignore_eos_path_runs_a_prefill_batch_over_the_budget_and_it_is_reported():
    """SGLang's bug (F8): 17 prompt tokens in one prefill batch, max_prefill_tokens 16."""
    result = run(F8_TRACE, "sglang", F8_CONFIG, SimOptions(record_schedule=True), profile("unit"))
    assert _first_step(result) == [("r0", 4), ("r1", 1), ("r2", 12)]
    assert [(v.invariant, v.step, v.found) for v in result.violations] == [
        ("accounting.budget", 1, "17")
    ]
    assert result.exit_code == 1


def test_the_same_requests_through_the_other_admission_path_stay_within_the_budget():
    """With the radix cache on, add_one_req takes `_select_prefill_admission`, which refuses
    r2 (12 page-ceiled tokens >= the 8 left): r0 and r1 run, then r2 alone."""
    cfg = dataclasses.replace(F8_CONFIG, enable_prefix_caching=True)
    result = run(F8_TRACE, "sglang", cfg, SimOptions(record_schedule=True), profile("unit"))
    assert _first_step(result) == [("r0", 4), ("r1", 1)]
    assert result.violations == [] and result.exit_code == 0
    assert result.finished == 3


@pytest.mark.parametrize("script", sorted(p.name for p in REPRO.glob("*.py")))
def test_the_standalone_reproduction_reproduces(script):
    """Each script imports only SGLang and exits 0 when SGLang still has the bug."""
    done = subprocess.run(
        [sys.executable, str(REPRO / script)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reproduced" in done.stdout.splitlines()[-1]
