"""A long replay keeps each finished request's outputs once (issue 30): the arrivals read a
parent's outputs from the run result instead of a copy of their own, and a later turn's
prompt, the schedule and the fingerprint are what they were with the copy."""

import numpy as np

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim import arrivals as arrivals_module
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces.schema import TraceRequest

CFG = EngineConfig(
    block_size=4,
    num_gpu_blocks=200,
    max_num_batched_tokens=64,
    max_num_seqs=8,
    enable_prefix_caching=False,  # a later turn's first chunk is then its whole prompt
)


def _conversation():
    return [
        TraceRequest("t0", 0.0, 3, prompt_token_ids=(5, 6, 7, 8, 9), session_id="s"),
        TraceRequest("x", 0.0, 4, prompt_token_ids=(3, 4)),
        TraceRequest(
            "t1", 0.0, 2, prompt_token_ids=(11, 12), session_id="s", parent_request_id="t0"
        ),
        TraceRequest("t2", 0.0, 2, prompt_token_ids=(13,), parent_request_id="t1"),
    ]


def _run():
    sim = Simulation(
        _conversation(), "reference", CFG, SimOptions(record_schedule=True), profile("unit")
    )
    return sim, sim.run()


def test_the_arrivals_read_outputs_from_the_result_and_schedule_as_with_a_copy(monkeypatch):
    sim, shared = _run()
    assert sim.arrivals.outputs is shared.outputs and shared.exit_code == 0
    first_t2 = next(r for o in shared.schedule for r in o.scheduled if r.request_id == "t2")
    t0, t1 = shared.outputs["t0"], shared.outputs["t1"]
    assert first_t2.token_ids.tolist() == [5, 6, 7, 8, 9, *t0, 11, 12, *t1, 13]
    monkeypatch.setattr(arrivals_module.Arrivals, "keep_outputs_in", lambda self, outputs: None)
    sim, copied = _run()
    assert isinstance(sim.arrivals.outputs["t0"], np.ndarray)  # its own copy, compact
    assert sim.arrivals.outputs["t0"].dtype == np.uint16
    assert (copied.fingerprint, copied.outputs) == (shared.fingerprint, shared.outputs)
