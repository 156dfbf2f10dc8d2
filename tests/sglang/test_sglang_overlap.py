"""SGLang's overlap scheduling (its default, `event_loop_overlap`; `async_scheduling` here):
batch N+1 is scheduled and launched before N's result is processed (engines/sglang/overlap.py).

Page size 1, 64 slots; the sampled tokens are made up (11, 12, ...): the adapter is driven
by hand, as the loop's async pipeline drives it (schedule N+1, then update N).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sglang_driver import SGLANG_0_5_23, config, request

from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID as P
from schedcheck.engines.protocol import SchedulerOutput

pytestmark = SGLANG_0_5_23

OVERLAP = {"async_scheduling": "true"}


def engine(**overrides):
    from schedcheck.engines.registry import make_engine

    return make_engine("sglang", config(extra=OVERLAP, **overrides))


def rows(output: SchedulerOutput) -> list[tuple]:
    """(id, num_computed, num_scheduled, num_tokens, tokens) of each scheduled request."""
    return [
        (r.request_id, r.num_computed_tokens, r.num_scheduled_tokens, r.num_tokens, tokens(r))
        for r in output.scheduled
    ]


def tokens(r) -> tuple[int, ...]:
    return tuple(r.token_ids.tolist())


def test_a_decode_runs_its_token_in_flight_and_the_finishing_one_is_not_scheduled():
    """Each decode reads the token the step in flight samples (a placeholder the runner
    fills in). With a's third token in flight, SGLang's scheduler leaves a out of the next
    batch (`_reqs_finishing_inflight`: that token finishes it by length), so that batch
    is empty and the step in flight finishes a."""
    e = engine()
    e.add_request(request("a", [1, 2, 3], 3))
    o1 = e.schedule()
    o2 = e.schedule()
    assert rows(o1) == [("a", 0, 3, 3, (1, 2, 3))]
    assert rows(o2) == [("a", 3, 1, 4, (P,))]
    assert e.update_from_output(o1, {"a": 11}) == []
    o3 = e.schedule()
    assert rows(o3) == [("a", 4, 1, 5, (P,))]
    assert e.update_from_output(o2, {"a": 12}) == []
    assert rows(e.schedule()) == []  # a's last token is in flight
    [done] = e.update_from_output(o3, {"a": 13})
    assert (done.request_id, done.output_token_ids, done.reason) == ("a", (11, 12, 13), "length")
    assert not e.has_unfinished_requests()


def test_a_request_retracted_with_its_token_in_flight_loses_that_token():
    """The preempt fault (SGLang's retraction hook) retracts b while b's second token is in
    flight: SGLang skips it when the result comes (`req.is_retracted`), so the output names
    b in dropped_req_ids as well as preempted; b comes back with a hit on prompt + first
    output and runs position 3 again (its first output, 21, is known now)."""
    e = engine()
    e.add_request(request("a", [1, 2, 3], 5))
    e.add_request(request("b", [4, 5, 6], 5))
    o1 = e.schedule()
    o2 = e.schedule()
    assert rows(o2) == [("a", 3, 1, 4, (P,)), ("b", 3, 1, 4, (P,))]
    e.update_from_output(o1, {"a": 11, "b": 21})
    e._force_retract = True  # as inject_fault("preempt") sets it
    o3 = e.schedule()
    assert (rows(o3), o3.preempted_req_ids, o3.dropped_req_ids) == (
        [("a", 4, 1, 5, (P,))],
        ("b",),
        ("b",),
    )
    assert e.rare_path_counts() == {"retract-with-token-in-flight": 1, "mixed-chunk-step": 0}
    e.update_from_output(o2, {"a": 12, "b": 22})
    o4 = e.schedule()
    assert rows(o4) == [("b", 3, 1, 4, (21,))]
    assert o4.scheduled[0].num_cached_tokens == 3


class _Low:
    """An rng whose draws take the pause (inject_fault draws random() < 0.5)."""

    def random(self) -> float:
        return 0.0


def test_a_pause_waits_for_the_batch_in_flight_then_retracts_everything():
    """The preempt fault's pause (pause_generation(mode="retract")) while b's second chunk
    is in flight: under overlap SGLang's pause processes that batch first, so the next
    schedule() runs nothing, the loop hands the batch's tokens over, and the pause then
    retracts a (decoding) and b (chunked). Both come back in the next batch: a with a hit
    on its prompt, b on the one position its first chunk checkpointed."""
    e = engine(max_num_batched_tokens=4)
    e.add_request(request("a", [1, 2, 3], 5))
    e.add_request(request("b", range(10, 20), 2))
    o1 = e.schedule()
    o2 = e.schedule()
    assert rows(o1) == [("a", 0, 3, 3, (1, 2, 3)), ("b", 0, 1, 10, (10,))]
    assert rows(o2) == [("b", 1, 4, 10, (11, 12, 13, 14))]
    e.update_from_output(o1, {"a": 11})
    what = e.inject_fault("preempt", _Low())
    assert what == "pause_generation(retract) once the batch in flight is processed"
    assert rows(e.schedule()) == []  # waits for the batch in flight
    assert e.update_from_output(o2, {}) == []
    o4 = e.schedule()
    assert (rows(o4), o4.preempted_req_ids, o4.dropped_req_ids) == (
        [("a", 3, 1, 4, (11,)), ("b", 1, 3, 10, (11, 12, 13))],
        ("a", "b"),
        (),
    )
    assert [r.num_cached_tokens for r in o4.scheduled] == [3, 1]


def test_overlap_replays_a_trace_clean_with_the_outputs_of_the_normal_loop():
    """The same trace, overlap on and off, through the simulator with every invariant:
    clean both ways, the same outputs (the hash model's, a function of the prompt), other
    steps (other fingerprints); under overlap, chunks ran tokens still in flight."""
    from schedcheck.sim.loop import run
    from schedcheck.traces.schema import TraceRequest

    trace = [
        TraceRequest(
            f"r{i}",
            0.01 * i,
            3 + i % 4,
            input_length=12 + i,
            hash_ids=(1, 2 + i),
            hash_block_size=16,
        )
        for i in range(10)
    ]
    results = {
        overlap: run(trace, "sglang", config(block_size=4, num_gpu_blocks=32, extra=extra))
        for overlap, extra in (("on", OVERLAP), ("off", {}))
    }
    on, off = results["on"], results["off"]
    assert on.violations == off.violations == []
    assert dict(on.outputs) == dict(off.outputs)
    assert len(on.outputs) == 10
    assert on.fingerprint != off.fingerprint
    assert on.coverage["async-output-placeholder"] > 0 == off.coverage["async-output-placeholder"]


# shrunk by the first overlap campaigns (harness errors, fixed; tests/sglang/scenarios/):
# r1 aborted while it decodes in both batches in flight (a KeyError: the adapter forgot it
# when the first one's result freed it); r0 aborted with its first token in flight, its
# discarded decode reading that token, which r2, a later turn, then shares (a false
# shadow-kv.read: the runner did not fill the discarded chunk's placeholder in)
ABORTED_IN_FLIGHT = ("aborted-in-two-batches", "discarded-decode-of-a-token-in-flight")
SCENARIOS = Path(__file__).parent / "scenarios"


def scenario(name: str):
    from schedcheck.fuzz.scenario import Scenario

    return Scenario.from_json_text((SCENARIOS / f"{name}.json").read_text())


@pytest.mark.parametrize("name", ABORTED_IN_FLIGHT)
def test_a_request_aborted_with_tokens_in_flight_replays_clean(name):
    result = scenario(f"overlap-{name}").run()
    assert result.violations == []
    assert result.aborted == 1 and result.finished == 1


def test_a_pause_behind_a_batch_of_aborted_requests_runs_at_once():
    """Shrunk by a page-16 overlap campaign (a harness error, fixed): at step 20 the pause
    fired while the batch in flight ran only aborted r2's last forward, no step of the
    simulator's, so no tokens would ever come for it; waiting for them stalled the run
    (liveness). That batch's tokens are no one's: the pause runs at once."""
    result = scenario("overlap-pause-behind-an-aborted-batch").run()
    assert (result.violations, result.stuck) == ([], {})
    assert (
        "step 20: preempt: pause_generation(retract) with a chunked prefill in flight"
        in (result.faults_fired[6])
    )
    assert len(result.outputs["r1"]) == 7
