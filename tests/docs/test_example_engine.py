"""The how-to's example engine (docs/examples/decode_first_engine.py) is a working scheduler.

It replays the bundled trace and fuzzes clean, and the checks see a bug planted in it: the
block table one block short whenever a chunk ends exactly on a block boundary (vllm#7371's
class), written as a subclass here so the example itself stays clean.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedcheck.cli.entry import main
from schedcheck.engines.protocol import EngineConfig, EngineRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
ENGINE = "decode_first_engine:make_engine"


@pytest.fixture(autouse=True)
def _examples_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def run_json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_it_replays_the_bundled_trace_clean(capsys):
    argv = ["replay", "--engine", ENGINE, "--no-prefix-caching", "--max-requests", "40"]
    code, out = run_json(capsys, argv)
    assert code == 0
    assert (out["requests"], out["finished"], out["violations"]) == (40, 40, [])


def test_it_passes_the_conformance_kit(capsys):
    code, out = run_json(capsys, ["conformance", "--engine", ENGINE])
    assert (code, out["passed"]) == (0, True)
    assert {c["name"]: c["status"] for c in out["checks"]} == {
        "admission": "pass",
        "chunked-prefill": "pass",
        "prefix-hit": "skip",
        "full-hit": "skip",
        "cache-salt": "skip",
        "preemption": "pass",
        "abort-mid-chunk": "pass",
        "rejection": "pass",
        "later-turn": "pass",
        "finish": "pass",
    }


def test_a_short_fuzz_campaign_finds_nothing(capsys, tmp_path):
    argv = ["fuzz", "--engine", ENGINE, "--seed", "0", "--no-db", "--max-examples", "64"]
    code, out = run_json(capsys, [*argv, "--out", str(tmp_path)])
    assert code == 0
    assert out["found"] is False
    assert out["examples"] == 64


def test_preemption_recomputes_and_every_request_finishes():
    """Two requests that cannot both hold their KV: the newer is preempted, then finishes."""
    import decode_first_engine as dfe
    import numpy as np

    cfg = EngineConfig(block_size=4, num_gpu_blocks=3, max_num_batched_tokens=16)
    engine = dfe.make_engine(cfg)
    for rid in ("a", "b"):
        engine.add_request(EngineRequest(rid, np.arange(1, 5, dtype=np.int64), max_tokens=4))
    finished, preempted = [], []
    for _ in range(40):
        out = engine.schedule()
        preempted += out.preempted_req_ids
        sampled = {s.request_id: 7 for s in out.scheduled if s.samples}
        finished += engine.update_from_output(out, sampled)
        if not engine.has_unfinished_requests():
            break
    assert preempted == ["b"]
    assert [(f.request_id, f.output_token_ids, f.reason) for f in finished] == [
        ("a", (7, 7, 7, 7), "length"),
        ("b", (7, 7, 7, 7), "length"),
    ]
    assert list(engine.allocator.ref_cnt) == [0, 0, 0]


class ShortBlockTable:
    """The planted bug: floor instead of ceiling when sizing the block table."""

    @staticmethod
    def make_engine(config: EngineConfig):
        import decode_first_engine as dfe

        class Buggy(dfe.DecodeFirstEngine):
            def _blocks_for(self, req, num_end_tokens):
                return max(1, num_end_tokens // self.config.block_size)

        return Buggy(config)


def test_a_planted_bug_is_found(capsys, tmp_path, monkeypatch):
    import sys
    import types

    module = types.ModuleType("planted_bug_engine")
    module.make_engine = ShortBlockTable.make_engine
    monkeypatch.setitem(sys.modules, "planted_bug_engine", module)
    argv = ["fuzz", "--engine", "planted_bug_engine:make_engine", "--seed", "0", "--no-db"]
    code, out = run_json(capsys, [*argv, "--max-examples", "64", "--out", str(tmp_path)])
    assert code == 1
    assert out["found"] is True
    assert (out["examples"], out["shrunk_requests"]) == (3, 1)
    assert out["finding"]["kind"] == "accounting.block-table-short"
    assert out["finding"]["headline"] == (
        "step 5: accounting.block-table-short: request r0 position 4: block table holds 1 "
        "blocks, tokens up to 5 need 2"
    )
