"""Campaigns and sweeps on a real two-node Ray cluster on the loopback address (tox -e ray).

The same seed gives the same finding and the same shrunk bundle on one local process and
on the cluster with four rounds in flight; a node lost mid-campaign loses nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

# before ray is imported: a Ray of this machine keeps to the loopback address
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")  # (this folder is not named ray: it would shadow it)
from ray._private import state as ray_state  # noqa: E402 (per-node free CPUs)
from ray.cluster_utils import Cluster  # noqa: E402

from schedcheck.fuzz.campaign import CampaignOptions, run_campaign  # noqa: E402
from schedcheck.fuzz.ray_cluster import sweep_runner  # noqa: E402
from schedcheck.fuzz.swarm import SwarmSpec  # noqa: E402
from schedcheck.fuzz.sweep import SweepJob, grid, run_here, sweep  # noqa: E402
from schedcheck.traces import iter_trace  # noqa: E402

pytestmark = pytest.mark.ray

# stale-cache-hit with 4 examples a round is found in round 6 with seed 0: rounds 0-5 are
# clean, so a campaign runs long enough for a node to be lost under it
SPEC = SwarmSpec(mutant="stale-cache-hit")
SLICE = Path(__file__).resolve().parents[2] / "traces/corpus/mooncake_conversation_first200.jsonl"


def _options(out: Path, **kw) -> CampaignOptions:
    base = dict(
        spec=SPEC,
        seed=0,
        budget_s=240.0,
        out_dir=str(out),
        db_dir=None,
        examples_per_round=4,
        shrink_runs_max=30,
    )
    return CampaignOptions(**{**base, **kw})


def _bundle_facts(bundle: str) -> tuple[object, object]:
    folder = Path(bundle)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    violations = json.loads((folder / "violations.json").read_text(encoding="utf-8"))
    return summary["fingerprint"], violations


def _same_finding(a: dict, b: dict) -> None:
    for key in ("round", "round_seed", "kind", "headline", "scenario", "shrunk_requests"):
        assert a[key] == b[key], key
    assert _bundle_facts(a["bundle"]) == _bundle_facts(b["bundle"])


@pytest.fixture(scope="module")
def local_finding(tmp_path_factory) -> dict:
    result = run_campaign(_options(tmp_path_factory.mktemp("local")))
    assert result.found and result.finding["round"] == 6
    return result.finding


@pytest.fixture
def cluster():
    """A head node and a worker node, each its own raylet, on 127.0.0.1."""
    loopback = "127.0.0.1"  # nothing listens on another address
    two = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": loopback})
    worker = two.add_node(num_cpus=1, node_ip_address=loopback)
    two.wait_for_nodes()
    yield two, worker
    ray.shutdown()
    two.shutdown()


def test_the_cluster_finds_what_one_local_process_finds(cluster, local_finding, tmp_path):
    two, _ = cluster
    assert two.address.startswith("127.0.0.1:")
    result = run_campaign(_options(tmp_path, on_ray=True, ray_address=two.address, workers=4))
    assert result.found and not result.errors
    _same_finding(result.finding, local_finding)
    assert Path(result.finding["bundle"]).parent == tmp_path  # written by the driver
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2


def _busy(node_id: str) -> bool:
    """Whether every CPU of the node is taken by a running round."""
    if not ray.is_initialized():
        return False  # the campaign has not connected yet
    free = ray_state.available_resources_per_node().get(node_id)
    return free is not None and free.get("CPU", 0.0) == 0.0


def test_a_node_lost_mid_campaign_loses_nothing(cluster, local_finding, tmp_path):
    two, worker = cluster
    messages: list[dict] = []
    outcome: dict = {}

    def campaign() -> None:
        options = _options(tmp_path, on_ray=True, ray_address=two.address, workers=4)
        outcome["result"] = run_campaign(options, messages.append)

    thread = threading.Thread(target=campaign)
    thread.start()
    deadline = time.monotonic() + 120
    while not _busy(worker.node_id) and time.monotonic() < deadline:
        time.sleep(0.05)  # until a round runs on the worker node (its one CPU taken)
    assert thread.is_alive() and _busy(worker.node_id), "no round ran on the worker node"
    two.remove_node(worker)  # the round running there dies with it
    thread.join(timeout=600)
    assert not thread.is_alive()
    result = outcome["result"]
    assert not any(n["Alive"] for n in ray.nodes() if n["NodeID"] == worker.node_id)
    assert result.found and not result.errors
    _same_finding(result.finding, local_finding)
    rounds = sorted(m["round"] for m in messages if m["type"] == "progress")
    assert rounds[:7] == list(range(7))  # every round up to the finding came back


def test_a_sweep_on_the_cluster_gives_the_local_rows(cluster, tmp_path):
    two, _ = cluster
    requests = list(iter_trace(SLICE, max_requests=6))
    points = grid(["reference"], ["hashed"], [1, 16], [512], [None])
    work = [(point, requests) for point in points]
    job = SweepJob("llama3-8b-h100", mutant="hash-no-parent")
    here = sweep(job, work, tmp_path / "here", run_here)
    there = sweep(job, work, tmp_path / "there", sweep_runner(two.address, 2))
    strip = ("bundle", "shrunk_bundle")
    assert [{k: v for k, v in r.items() if k not in strip} for r in there] == [
        {k: v for k, v in r.items() if k not in strip} for r in here
    ]
    assert [r["outcome"] for r in there] == ["shadow-kv.read", "clean"]
    assert Path(there[0]["shrunk_bundle"]).is_dir()
