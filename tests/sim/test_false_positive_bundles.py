"""Two false findings the fuzzer made against the clean reference engine, pinned by bundle:
the simulator, not the engine, was wrong. Both must now replay clean.

- a step that only preempts (the first running request preempts itself and nothing runs)
  was dropped: a false liveness failure, or a false contiguity violation next step;
- the radix manager moved a chunk onto the tree's identical pages and freed its own copies;
  another request got those pages and wrote them: a false write-into-shared-block;
- forced preemptions (a fault point) kept resetting a 1-token-per-step prefill forever: a
  livelock of the fault, not of the engine (the liveness phase is now fault-free).
"""

from pathlib import Path

import pytest

from schedcheck.sim.bundles import rerun_bundle

BUNDLES = Path(__file__).resolve().parent / "bundles"


@pytest.mark.parametrize("name", sorted(p.name for p in BUNDLES.iterdir()))
def test_clean_engine_bundle_replays_clean(name):
    result, bundle = rerun_bundle(BUNDLES / name)
    assert bundle.violations or bundle.summary.get("stuck")  # what was once reported
    assert (result.exit_code, result.violations, result.stuck) == (0, [], {})
