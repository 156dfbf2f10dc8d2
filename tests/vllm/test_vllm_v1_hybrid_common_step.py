"""The shadow KV's common step on vLLM's hybrid KV cache (tox -e vllm-v1): a step of a full
group and a sliding-window group runs in one compiled call (sim/common_step.py), and a run
reports exactly what the phase-by-phase path reports: the same fingerprint, violations,
counts and keys checked, on scenarios the swarm draws with a sliding window."""

from __future__ import annotations

import collections
from unittest import mock

from hypothesis import HealthCheck, Phase, given, seed, settings
from vllm_driver import NEEDS_VLLM_V1

from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.sim.symbolic import SymbolicExecutor

pytestmark = NEEDS_VLLM_V1

SPEC = SwarmSpec(
    engine="vllm-v1", families=("sliding-window",), ignore=("engine-crash", "liveness")
)


def _report(scenario: Scenario) -> tuple[object, ...]:
    r = scenario.run()
    violations = [v.to_json() for v in r.violations]
    return r.fingerprint, violations, r.exit_code, r.invariants_checked, r.stuck, r.steps


def test_a_hybrid_run_reports_the_same_with_the_common_step_and_without():
    taken: collections.Counter[tuple[int, bool]] = collections.Counter()
    original = SymbolicExecutor._common_step

    def counted(self, meta, *args):
        written, sampled = original(self, meta, *args)
        taken[len(meta.kv_groups), sampled is not None] += 1
        return written, sampled

    @seed(20261206)
    @settings(
        max_examples=25,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(scenarios(SPEC))
    def same_reports(scenario):
        with mock.patch.object(SymbolicExecutor, "_common_step", counted):
            fused = _report(scenario)
        with mock.patch.object(SymbolicExecutor, "use_common_step", False):
            plain = _report(scenario)
        assert fused == plain

    same_reports()
    # it compares something: most hybrid steps tried took the common step
    assert taken[2, True] > 25 and taken[2, True] > taken[2, False]
