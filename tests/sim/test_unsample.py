"""A dropped sample forgotten (SampleRollback, sim/executors.py): async scheduling, when the
engine drops the tokens sampled in a step in flight (SchedulerOutput.dropped_req_ids), the
runner forgets them and samples the same positions again, to the same tokens."""

import numpy as np
import pytest

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.sim.executors import SampleRollback
from schedcheck.sim.hash_executor import HashModelExecutor
from schedcheck.sim.symbolic import SymbolicExecutor

PROMPT = np.arange(10, 16, dtype=np.int64)  # 6 tokens: blocks [10..13][14 15 . .]


def _step(step, computed, scheduled, num_tokens, chunk, table=(2, 3)):
    req = ScheduledRequest("a", computed, scheduled, num_tokens, 6, chunk, table)
    return build_metadata(SchedulerOutput(step=step, scheduled=(req,)), 4)


def _run(executor, drop_second: bool):
    """a's prompt in one chunk, then two decodes (its second sample dropped once and
    sampled again where asked); its three samples."""
    executor.add_request("a", PROMPT)
    first = executor.execute(_step(1, 0, 6, 6, PROMPT))["a"]
    second = executor.execute(_step(2, 6, 1, 7, np.asarray([first])))["a"]
    if drop_second:
        executor.unsample("a", (second,))  # the step's output dropped: its KV never ran
        assert executor.execute(_step(3, 6, 1, 7, np.asarray([first])))["a"] == second
    third = executor.execute(_step(4, 7, 1, 8, np.asarray([second]), (2, 3)))["a"]
    return first, second, third


@pytest.mark.parametrize("make", [lambda: SymbolicExecutor(8, 4, 1000), HashModelExecutor])
def test_a_forgotten_sample_is_sampled_again_to_the_same_token(make):
    """The same samples as a run that never dropped one, after the drop too (the
    executor's identity of the request's tokens went back with it)."""
    executor = make()
    assert isinstance(executor, SampleRollback)
    assert _run(executor, drop_second=True) == _run(make(), drop_second=False)
    assert getattr(executor, "violations", []) == []


def test_the_symbolic_executor_refuses_to_forget_a_sample_it_never_drew():
    executor = SymbolicExecutor(8, 4, 1000)
    _, second, third = _run(executor, drop_second=False)
    with pytest.raises(AssertionError, match="a"):
        executor.unsample("a", (third + 1,))  # not its last sample
    with pytest.raises(AssertionError, match="KV was verified"):
        executor.unsample("a", (second, third))  # second's KV was written and read
    executor.unsample("gone", (1,))  # a request it does not know: nothing to forget


def test_the_pipeline_forgets_a_dropped_sample_and_refuses_a_drop_with_none_in_flight():
    """Pipeline.drop: the samples of the steps in flight for the requests an output names
    are forgotten by the ledger and the executor; a request named with no sample in flight
    is the engine's protocol error."""
    from schedcheck.engines.protocol import EngineConfig
    from schedcheck.sim.arrivals import Release
    from schedcheck.sim.async_runner import InFlight
    from schedcheck.sim.cost_model import profile
    from schedcheck.sim.coverage import Coverage
    from schedcheck.sim.executors import ExecutorParts
    from schedcheck.sim.ledger import Ledger
    from schedcheck.sim.pipelined import Pipeline
    from schedcheck.sim.result import RunResult, SimOptions
    from schedcheck.traces.schema import TraceRequest

    result = RunResult("vllm-v1", EngineConfig(), SimOptions(), profile("unit"))
    ledger = Ledger(2, result, lambda rid, done: None)
    ledger.admit(Release(TraceRequest("a", 0.0, 3, prompt_token_ids=(5, 6)), PROMPT[:2]), 0.0)
    executor = HashModelExecutor()
    executor.add_request("a", PROMPT[:2])
    sampled = executor.execute(_step(1, 0, 2, 2, PROMPT[:2], (2,)))  # its first token
    ledger.sampled_by_runner("a", (sampled["a"],))
    pipeline = Pipeline(2, ledger, Coverage(4, 0), None, ExecutorParts.of(executor))
    pipeline.in_flight.append(InFlight(SchedulerOutput(1, ()), sampled, {}, {}))
    out = SchedulerOutput(2, (), preempted_req_ids=("a", "b"), dropped_req_ids=("a", "b"))
    violations = pipeline.drop(out)
    assert [(v.invariant, v.request_id) for v in violations] == [("protocol.dropped", "b")]
    assert (ledger.sampled["a"], ledger.num_tokens["a"]) == ([], 2)
    assert executor.last_identity["a"][0] == 2  # the executor forgot it too


def test_a_discarded_chunk_reads_its_token_in_flight_from_what_the_runner_sampled():
    """Pipeline.as_run: a request the simulator retired (aborted) that the engine runs once
    more (`discarded`, SGLang) may decode the token still in flight (a placeholder); the
    runner fills it in from the tokens it sampled for the request, kept in the run's
    outputs. Without it the discarded KV was written as an unknown token (a false
    shadow-kv.read when a later turn shared it), found by the first SGLang overlap
    campaign."""
    from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID, EngineConfig
    from schedcheck.sim.cost_model import profile
    from schedcheck.sim.coverage import Coverage
    from schedcheck.sim.ledger import Ledger
    from schedcheck.sim.pipelined import Pipeline
    from schedcheck.sim.result import RunResult, SimOptions

    result = RunResult("sglang", EngineConfig(), SimOptions(), profile("unit"))
    result.outputs["a"] = [41, 42]  # a's samples when it was aborted
    pipeline = Pipeline(2, Ledger(2, result, lambda rid, done: None), Coverage(4, 0), None, None)
    decode = ScheduledRequest("a", 3, 1, 4, 2, np.asarray([PLACEHOLDER_TOKEN_ID]), (1,))
    known = ScheduledRequest("b", 2, 1, 3, 2, np.asarray([7]), (2,))
    run = pipeline.as_run(SchedulerOutput(5, (), discarded=(decode, known)))
    assert [r.token_ids.tolist() for r in run.discarded] == [[42], [7]]
    assert run.discarded[1] is known
    assert pipeline.coverage.counts["async-output-placeholder"] == 0  # no scheduled chunk
