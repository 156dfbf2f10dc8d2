"""F9, SGLang's: an abort of a chunked prefill is dropped when a retracting pause
(`pause_generation(mode="retract")`) comes before the next scheduling step;
`process_pending_chunked_abort` drops its marker since the retracted request holds no KV,
and the request, back in the waiting queue, is prefilled again before it ends
(tests/sglang/repro/f9_chunked_abort_lost_across_a_retracting_pause.py, docs/sglang.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sglang_driver import SGLANG_0_5_23, config, request

pytestmark = SGLANG_0_5_23

SCENARIOS = Path(__file__).parent / "scenarios"


class _Low:
    """An rng whose draws take the pause (inject_fault draws random() < 0.5)."""

    def random(self) -> float:
        return 0.0


def chunks(chunk_list) -> list[tuple[str, int, int]]:
    return [(r.request_id, r.num_computed_tokens, r.num_scheduled_tokens) for r in chunk_list]


def test_an_aborted_chunked_prefill_is_prefilled_again_after_a_retracting_pause():
    """Budget 4, x's 20-token prompt. x's first chunk runs; x is aborted (SGLang records
    it for the next step) and a pause retracts x before that step. SGLang then runs x's
    whole prompt again, 0..20, in 5 forwards whose output is discarded (the simulator has
    retired x), and only then ends it. Without the pause, the next step ends it."""
    from schedcheck.engines.registry import make_engine

    for pause in (True, False):
        e = make_engine("sglang", config(max_num_batched_tokens=4))
        e.add_request(request("x", range(10, 30), 3))
        first = e.schedule()
        assert chunks(first.scheduled) == [("x", 0, 4)]
        e.update_from_output(first, {})
        e.abort_request("x")
        if pause:
            assert e.inject_fault("preempt", _Low()).startswith("pause_generation(retract)")
        ran = []
        for _ in range(8):  # bounded
            out = e.schedule()
            assert out.scheduled == ()
            ran += chunks(out.discarded)
            if not e.has_unfinished_requests():
                break
        if pause:
            assert ran == [("x", 0, 4), ("x", 4, 4), ("x", 8, 4), ("x", 12, 4), ("x", 16, 4)]
        else:
            assert ran == []
        assert not e.has_unfinished_requests()


@pytest.mark.parametrize("mixed", ["true", "false"])
def test_the_campaigns_finding_is_reported_as_a_stall(mixed):
    """Shrunk by a page-1 overlap campaign with mixed chunks on (no mixed step ran: the
    same with them off): r4 (a later turn of r2) is aborted mid-chunk while a pause waits
    for its batch in flight; the pause retracts it and its abort is dropped, so SGLang
    prefills it again, and the preempt fault's later pauses restart it each time: only
    discarded chunks run while SGLang still holds r4 (liveness, exit 3)."""
    from schedcheck.fuzz.scenario import Scenario

    text = (SCENARIOS / "overlap-abort-of-a-chunked-prefill-before-a-pause.json").read_text()
    scenario = json.loads(text)
    scenario["config"]["extra"]["enable_mixed_chunk"] = mixed
    result = Scenario.from_json_text(json.dumps(scenario)).run()
    assert result.violations == []
    assert result.stuck == {"*": "the engine schedules nothing while requests wait"}
    assert (result.finished, result.aborted) == (3, 2)
    assert result.coverage["mixed-chunk-step"] == 0
    fired = result.faults_fired
    assert "step 17: abort-mid-chunk: aborted r4" in fired
    assert (
        "step 17: preempt: pause_generation(retract) once the batch in flight is processed" in fired
    )
