"""Fuzz the clean reference engine under the loaded Hypothesis profile (ci: 150 examples,
derandomized): no generated scenario may violate an invariant or get stuck, with either
block manager. A failure here is a bug of the reference engine (or of the simulator)."""

import pytest
from hypothesis import given

from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.verdict import outcome


def _check(scenario: Scenario) -> None:
    verdict = outcome(scenario)
    assert not verdict.failed, f"{verdict.headline}\nscenario: {scenario.dumps()}"


@pytest.mark.parametrize("block_manager", ["hashed", "radix"])
def test_the_clean_reference_engine_passes_every_generated_scenario(block_manager):
    given(scenarios(SwarmSpec(block_manager=block_manager)))(_check)()
