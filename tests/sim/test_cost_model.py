"""The step cost model: exact times of small steps, and its overrides."""

import numpy as np
import pytest

from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.sim.cost_model import StepCostModel, profile


def _step() -> SchedulerOutput:
    """A prefill chunk of 5 tokens that samples (0..4 of 5) and a decode at position 9."""
    prefill = ScheduledRequest("a", 0, 5, 5, 5, np.arange(11, 16), (0,))
    decode = ScheduledRequest("b", 9, 1, 10, 8, np.array([21]), (1,))
    return SchedulerOutput(step=0, scheduled=(prefill, decode))


def test_a_step_costs_its_fixed_part_its_rows_and_its_kv_read():
    meta = build_metadata(_step(), block_size=16)
    model = StepCostModel("m", fixed_us=100.0, prefill_token_us=3.0, decode_request_us=7.0,
                          context_token_us=0.5)  # fmt: skip
    # 4 prefill rows that do not sample, 2 sampling rows, seq_lens 5 + 10
    assert model.step_time_us(meta) == 100.0 + 3.0 * 4 + 7.0 * 2 + 0.5 * 15


def test_the_unit_profile_costs_its_fixed_part_only():
    assert profile("unit").step_time_us(build_metadata(_step(), block_size=16)) == 10_000.0


def test_overrides_replace_one_coefficient_and_refuse_a_bad_one():
    model = profile("unit").with_overrides("context_token_us=2")
    assert model.name == "unit+overrides" and model.context_token_us == 2.0
    assert model.step_time_us(build_metadata(_step(), block_size=16)) == 10_000.0 + 2.0 * 15
    with pytest.raises(ValueError, match="must be >= 0"):
        profile("unit").with_overrides("fixed_us=-1")
