#!/usr/bin/env python3
"""Campaign throughput: examples per second with 1, 2 and 4 workers, local processes beside
Ray tasks on a local Ray, in one run (these machines are noisy: read the ratios).

The clean reference engine is fuzzed for `--budget-s` seconds per configuration (nothing to
find, so every configuration runs its whole budget); examples are counted by the campaign.
A local Ray is started once and kept for every Ray configuration, as a cluster would be.

    python bench/campaign_scale.py --budget-s 30 --json     # needs schedcheck[ray]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from schedcheck.fuzz.campaign import CampaignOptions, run_campaign
from schedcheck.fuzz.swarm import SwarmSpec


def measure(backend: str, workers: int, budget_s: float, seed: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        options = CampaignOptions(
            spec=SwarmSpec(),
            seed=seed,
            workers=workers,
            budget_s=budget_s,
            out_dir=out,
            db_dir=None,
            on_ray=backend == "ray",
        )
        started = time.monotonic()
        result = run_campaign(options)
        wall_s = time.monotonic() - started
    assert not result.found and not result.errors, (result.finding, result.errors)
    return {
        "backend": backend,
        "workers": workers,
        "examples": result.examples,
        "wall_s": round(wall_s, 2),
        "examples_per_s": round(result.examples / wall_s, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=30.0)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from schedcheck.fuzz.ray_cluster import connect

    ray = connect(None)  # a local Ray on the loopback address, kept for every Ray row
    rows = []
    for workers in (int(w) for w in args.workers.split(",")):
        for backend in ("processes", "ray"):
            rows.append(measure(backend, workers, args.budget_s, args.seed))
            print(json.dumps(rows[-1]), file=sys.stderr)
    base = {r["backend"]: r["examples_per_s"] for r in rows if r["workers"] == rows[0]["workers"]}
    for row in rows:
        row["vs_one_process"] = round(row["examples_per_s"] / base["processes"], 2)
    report = {"rows": rows, "cpus": os.cpu_count(), "load_average": os.getloadavg()}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for row in rows:
            print(
                f"{row['backend']:<10} {row['workers']} worker(s): {row['examples_per_s']:8.2f} "
                f"examples/s ({row['vs_one_process']:.2f}x one process)"
            )
        print(f"cpus {report['cpus']}, load average {report['load_average']}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
