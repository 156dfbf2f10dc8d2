"""One round of a campaign as a self-contained task: for a node that shares no disk.

    run_round_task(job, r)  on any node, in a temporary directory
      ├─ round r of the campaign (worker.run_round: Hypothesis with seed (S, r))
      ├─ a finding: shrunk there (worker.finish_finding), as a local worker does
      └─ returns {"messages": [...], "bundles": {name: {relative path: bytes}}}
    unpack_bundles(result, out_dir)  on the driver: writes the bundles under --out and
                                     points each message's "bundle" at its copy

Plain data in, plain data out (a WorkerJob pickles), so a Ray task, a process pool or a
test runs it alike. No failure database on the node: the driver replays and records it.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from schedcheck.fuzz.worker import WorkerJob, finish_finding, run_round
from schedcheck.sim.bundle_data import pack_dir, unpack_dir


def run_round_task(job: WorkerJob, round_index: int) -> dict[str, Any]:
    """Run round `round_index` of `job`'s campaign; its messages and bundles as data."""
    with tempfile.TemporaryDirectory(prefix="schedcheck-round-") as tmp:
        here = dataclasses.replace(job, out_dir=tmp, db_dir=None)
        messages: list[dict[str, Any]] = []
        started = time.monotonic()
        probe, found = run_round(here, round_index, messages.append, lambda: False)
        messages.append(
            {
                "type": "progress",
                "worker": job.worker_index,
                "round": round_index,
                "examples": probe.examples,
                "coverage": probe.coverage,
                "round_s": round(time.monotonic() - started, 3),
            }
        )
        if probe.clean_failure is not None:
            messages.append({"type": "clean-failure", **probe.clean_failure})
        if found is not None:
            messages.append(finish_finding(here, probe, found))
        return {"messages": messages, "bundles": _pack(messages, Path(tmp))}


def _pack(messages: list[dict[str, Any]], root: Path) -> dict[str, dict[str, bytes]]:
    """Every bundle a message names, as {directory name: {relative path: bytes}}."""
    packed: dict[str, dict[str, bytes]] = {}
    for message in messages:
        bundle = message.get("bundle")
        if not bundle:
            continue
        folder = Path(bundle)
        assert folder.parent == root, f"a round's bundles lie in its directory: {folder}"
        packed[folder.name] = pack_dir(folder)
        message["bundle"] = folder.name
    return packed


def unpack_bundles(result: dict[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    """Write the task's bundles under `out_dir`; its messages, naming the copies."""
    for name, files in sorted(result["bundles"].items()):
        unpack_dir(files, out_dir / name)
    messages = result["messages"]
    for message in messages:
        if message.get("bundle"):
            message["bundle"] = str(out_dir / message["bundle"])
    return messages
