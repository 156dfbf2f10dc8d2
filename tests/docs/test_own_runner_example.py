"""The own-engine guide's runner example (docs/examples/own_runner_engine.py).

An engine that hands its own runner's metadata (`runner_metadata(step)`) is checked on it:
nano-vllm's runner bug (the attention's key length taken as the whole known sequence,
KEY_LENGTH_BUG) is found through that path, and only through it: the same engine whose
metadata is derived by schedcheck instead runs clean.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
ENGINE = "own_runner_engine:make_engine"
DERIVED = "test_own_runner_example:make_derived"  # the same engine, handing nothing
# chunks of 8 tokens of 20-token prompts: every prefill is chunked
CONFIG = EngineConfig(
    block_size=4,
    num_gpu_blocks=64,
    max_num_batched_tokens=8,
    max_num_seqs=2,
    enable_prefix_caching=False,
)


@pytest.fixture(autouse=True)
def _examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def _trace() -> list[TraceRequest]:
    rng = np.random.default_rng(3)
    return [
        TraceRequest(f"r{i}", 0.001 * i, 4, tuple(rng.integers(3, 30_000, 20).tolist()))
        for i in range(2)  # bounded: two requests
    ]


def make_derived(config: EngineConfig):
    import own_runner_engine

    class Derived(own_runner_engine.OwnRunnerEngine):
        runner_metadata = None  # schedcheck derives the metadata from the SchedulerOutput

    return Derived(config)


def _run(engine: str, bug: bool, monkeypatch) -> list:
    import own_runner_engine

    monkeypatch.setattr(own_runner_engine, "KEY_LENGTH_BUG", bug)
    result = run(_trace(), engine, CONFIG, SimOptions(keep_going=True))
    assert result.finished == 2
    return result.violations


def test_its_own_runner_metadata_is_checked_and_clean(monkeypatch):
    assert _run(ENGINE, False, monkeypatch) == []


def test_the_key_length_bug_is_seen_through_the_handed_metadata_only(monkeypatch):
    found = _run(ENGINE, True, monkeypatch)
    assert found, "the planted runner bug went unseen"
    first = found[0]
    assert (first.invariant, first.step, first.request_id) == (
        "shadow-kv.runner-metadata-disagrees",
        1,
        "r0",
    )
    assert first.message == "seq_lens[0]: runner 20, derived 8"
    assert "shadow-kv.read" in {v.invariant for v in found}
    # schedcheck's own derivation from the (correct) schedule cannot see a runner bug
    assert _run(DERIVED, True, monkeypatch) == []
