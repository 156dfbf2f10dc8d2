"""A seed's draws do not depend on the modules a process loaded (fuzz/draws.py)."""

import importlib
import sys

from hypothesis import given, seed

from schedcheck.fuzz.scenario import scenarios
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.worker import WorkerJob, round_settings

# a module of literals spread over the ranges a scenario draws in (Hypothesis reads up to
# 1,024 constants a module, and no integer in (-100, 100): it draws those anyway)
LITERALS = ", ".join(str(n) for n in range(101, 20_000, 23))


def _drawn(rounds: int) -> list[str]:
    spec = SwarmSpec(engine="reference")
    job = WorkerJob(spec, campaign_seed=0, worker_index=0, budget_s=1e6, started_at_s=0, out_dir="")
    out: list[str] = []
    for r in range(rounds):
        test = round_settings(job, r)(
            seed(r)(given(scenarios(spec))(lambda s: out.append(s.dumps())))
        )
        test()
    return out


def test_a_seed_draws_the_same_examples_after_a_module_with_new_literals_loads(tmp_path):
    before = _drawn(12)
    (tmp_path / "many_literals.py").write_text(f"VALUES = ({LITERALS})\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module("many_literals")
        after = _drawn(12)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("many_literals", None)
    assert len(before) == 12 * 32 and after == before  # 48 of 384 differed without it
