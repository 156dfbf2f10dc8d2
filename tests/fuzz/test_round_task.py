"""A round as a self-contained task: its messages and bundles as data, unpacked by the driver
exactly as a local worker would have written them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

from schedcheck.cli.commands.campaign_progress import JsonLinesProgress
from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.round_task import run_round_task, unpack_bundles
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.worker import WorkerJob
from schedcheck.sim.bundle_data import pack_dir, unpack_dir


def _job(spec: SwarmSpec, out: Path) -> WorkerJob:
    return WorkerJob(
        spec=spec,
        campaign_seed=0,
        worker_index=0,
        budget_s=60.0,
        started_at_s=time.time(),
        out_dir=str(out),
        examples_per_round=4,
        shrink_runs_max=30,
    )


def test_a_round_task_returns_what_the_local_campaign_writes(tmp_path):
    spec = SwarmSpec(mutant="resume-drops-last-token")  # found in round 0 with seed 0
    local = run_campaign(
        CampaignOptions(
            spec=spec,
            seed=0,
            out_dir=str(tmp_path / "local"),
            db_dir=None,
            examples_per_round=4,
            shrink_runs_max=30,
        )
    )
    assert local.found and local.finding["round"] == 0
    result = run_round_task(_job(spec, tmp_path / "ignored"), 0)
    assert not (tmp_path / "ignored").exists()  # the task wrote only in its temporary dir
    assert sorted(result["bundles"]) == ["r0-raw", "r0-shrunk"]
    messages = unpack_bundles(result, tmp_path / "driver")
    assert [m["type"] for m in messages] == ["raw", "progress", "finding"]
    finding = messages[-1]
    assert finding["bundle"] == str(tmp_path / "driver" / "r0-shrunk")
    for key in ("kind", "headline", "scenario", "shrunk_requests", "round_seed"):
        assert finding[key] == local.finding[key]
    for name in ("r0-raw", "r0-shrunk"):
        assert _timeless(tmp_path / "driver" / name) == _timeless(tmp_path / "local" / name)


def _timeless(folder: Path) -> dict[str, object]:
    """A bundle's files, its summary without the wall time (the one thing runs differ in)."""
    files: dict[str, object] = dict(pack_dir(folder))  # its own path packed as {bundle}
    summary = json.loads(files.pop("summary.json"))
    del summary["wall_time_s"]
    return {**files, "summary.json": summary}


def test_pack_and_unpack_a_directory(tmp_path):
    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "a" / "x.json").write_bytes(b"{}\n")
    (tmp_path / "a" / "sub" / "y.xz").write_bytes(b"\xfd7zXZ")
    (tmp_path / "a" / "command.txt").write_text(f"schedcheck replay --bundle {tmp_path / 'a'}\n")
    packed = pack_dir(tmp_path / "a")
    assert packed == {
        "command.txt": b"schedcheck replay --bundle {bundle}\n",
        "sub/y.xz": b"\xfd7zXZ",
        "x.json": b"{}\n",
    }
    assert pack_dir(unpack_dir(packed, tmp_path / "b")) == packed
    command = (tmp_path / "b" / "command.txt").read_text()
    assert command == f"schedcheck replay --bundle {tmp_path / 'b'}\n"


def test_json_progress_counts_examples_findings_and_rounds_in_flight():
    stream = StringIO()
    progress = JsonLinesProgress(stream)
    progress({"type": "progress", "examples": 32, "repeats": 4, "coverage": {}, "in_flight": 3})
    progress({"type": "raw", "kind": "shadow-kv.read", "bundle": "b"})
    progress({"type": "progress", "examples": 16, "coverage": {}, "in_flight": 2})  # no repeats
    progress({"type": "finding", "kind": "shadow-kv.read", "in_flight": 1})
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["examples"], x["repeats"], x["findings"], x["in_flight"]) for x in lines] == [
        (32, 4, 0, 3),
        (48, 4, 0, 2),
        (48, 4, 1, 1),
    ]
    assert lines[-1]["last_found"] == "shadow-kv.read"
    assert all(x["examples_per_s"] >= 0 for x in lines)


def test_ray_without_ray_is_bad_usage_with_the_install_hint(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from schedcheck.cli.entry import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    for argv in (
        ["fuzz", "--ray", "--no-db", "--budget-s", "1"],
        ["sweep", "--ray", "--out", str(tmp_path / "s")],
    ):
        done = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2, done.stderr
        assert "pip install 'schedcheck[ray]'" in done.stderr
        assert "Traceback" not in done.stderr
