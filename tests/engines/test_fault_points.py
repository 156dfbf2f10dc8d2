"""The reference engine's fault points (sim/faults.py): each one does what it says, and a
fuzz-style run with all of them on stays clean."""

import numpy as np

from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.engines.reference.engine import make_engine
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest


def _engine(bm="hashed"):
    eng = make_engine(EngineConfig(block_size=4, num_gpu_blocks=32, max_num_batched_tokens=16,
                                   block_manager=bm))  # fmt: skip
    eng.add_request(EngineRequest("a", np.arange(3, 23, dtype=np.int64), 4))
    return eng


def test_forced_preemption_is_reported_in_the_next_step():
    eng = _engine()
    out = eng.schedule()
    eng.update_from_output(out, {})
    assert eng.inject_fault("preempt", np.random.default_rng(0)) == "preempted a"
    nxt = eng.schedule()
    assert nxt.preempted_req_ids == ("a",)
    assert nxt.scheduled[0].num_computed_tokens == 16  # re-admitted with its cached blocks


def test_reduced_budget_applies_to_one_step():
    eng = _engine()
    assert eng.inject_fault("reduced-budget", np.random.default_rng(3)).startswith("next step")
    budget = eng.scheduler.__dict__["_budget_override"]
    assert eng.schedule().total_num_scheduled_tokens == budget
    assert eng.scheduler.__dict__["_budget_override"] is None


def test_evict_drops_cached_free_blocks():
    for bm in ("hashed", "radix"):
        eng = _engine(bm)
        out = eng.schedule()
        eng.update_from_output(out, {})
        eng.abort_request("a")
        assert len(eng.kv_snapshot().cached_blocks()) == 4
        assert eng.inject_fault("evict", np.random.default_rng(1)) is not None
        assert len(eng.kv_snapshot().cached_blocks()) < 4


def test_all_fault_points_on_and_the_run_stays_clean():
    trace = [TraceRequest(f"r{i}", i * 0.005, 6, prompt_token_ids=tuple(range(3, 40 + 3 * i)))
             for i in range(8)]  # fmt: skip
    faults = {"preempt": 0.2, "evict": 0.3, "reduced-budget": 0.3, "abort-mid-chunk": 0.05}
    for bm in ("hashed", "radix"):
        cfg = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=16,
                           block_manager=bm)  # fmt: skip
        res = run(trace, "reference", cfg, SimOptions(seed=5, faults=faults), profile("unit"))
        assert (res.exit_code, res.violations, res.stuck) == (0, [], {})
        kinds = {line.split(": ")[1] for line in res.faults_fired}
        assert {"preempt", "reduced-budget"} <= kinds
