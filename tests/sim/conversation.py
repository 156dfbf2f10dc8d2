"""A three-turn conversation and a request beside it, at 1 ms a step: the trace the
session tests of each engine run (tests/vllm/test_vllm_v1_sessions.py,
tests/sglang/test_sglang_sessions.py), with sessions on and off."""

from schedcheck.sim.cost_model import StepCostModel
from schedcheck.traces.schema import TraceRequest

STEP_COST = StepCostModel("fixed", 1000.0, 0.0, 0.0, 0.0)  # 1 ms a step
CONVERSATION = (  # r1 continues r0, r2 continues r1; r3 beside them
    TraceRequest("r0", 0.0, 3, prompt_token_ids=tuple(range(100, 110))),
    TraceRequest("r1", 0.001, 2, prompt_token_ids=(300, 301, 302), parent_request_id="r0"),
    TraceRequest("r2", 0.002, 2, prompt_token_ids=(400,), parent_request_id="r1"),
    TraceRequest("r3", 0.0, 4, prompt_token_ids=tuple(range(200, 213))),
)
