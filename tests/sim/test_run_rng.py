"""The run's one generator is built at its first draw: the same stream as one built at once,
and a run that draws nothing never builds it."""

import dataclasses

import numpy as np

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.sim.run_rng import RunRng
from schedcheck.traces.schema import TraceRequest

CFG = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=16, max_num_seqs=4)


def test_built_at_the_first_call_then_the_same_object_and_stream():
    rng = RunRng(11)
    assert not rng.built
    first = rng()
    assert rng.built and rng() is first
    draws = [first.random(), *first.integers(0, 1 << 40, 3).tolist()]
    fresh = np.random.default_rng(11)
    assert draws == [fresh.random(), *fresh.integers(0, 1 << 40, 3).tolist()]


def _simulation(options: SimOptions, config: EngineConfig = CFG) -> Simulation:
    trace = [TraceRequest(f"r{i}", 0.0, 3, prompt_token_ids=tuple(range(3, 30))) for i in range(3)]
    return Simulation(trace, "reference", config, options, profile("unit"))


def test_a_run_without_faults_or_drafts_never_builds_it():
    sim = _simulation(SimOptions(seed=5))
    result = sim.run()
    assert result.exit_code == 0 and not sim.rng.built


def test_an_armed_fault_or_drafts_build_it():
    armed = _simulation(SimOptions(seed=5, faults={"reduced-budget": 0.5}))
    armed.run()
    assert armed.rng.built
    unarmed = _simulation(SimOptions(seed=5, faults={"reduced-budget": 0.0}))
    unarmed.run()
    assert not unarmed.rng.built
    spec = dataclasses.replace(CFG, num_speculative_tokens=2)
    drafts = _simulation(SimOptions(seed=5), spec)
    drafts.run()
    assert drafts.rng.built
