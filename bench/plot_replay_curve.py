#!/usr/bin/env python3
"""Plot a replay curve (`bench/replay_speed.py --curve FILE`): CPU time per step, RSS and
live requests against simulated time, as one PNG. Needs matplotlib (not a dependency of
schedcheck: any Python with matplotlib runs this file; it imports nothing else of ours).

    python bench/plot_replay_curve.py CURVE.jsonl docs/img/replay-curve.png
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys


def load(path: str) -> list[dict[str, float]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("curve")
    parser.add_argument("png")
    parser.add_argument("--title", default="Mooncake conversation trace, every invariant")
    parser.add_argument("--arrivals-end-s", type=float, default=None, help="a vertical line")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = load(args.curve)
    pairs = list(itertools.pairwise(points))
    sim_min = [b["sim_time_s"] / 60 for _, b in pairs]
    us_per_step = [
        1e6 * (b["cpu_time_s"] - a["cpu_time_s"]) / max(b["steps"] - a["steps"], 1)
        for a, b in pairs
    ]
    fig, (cost_ax, rss_ax) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    cost_ax.plot(sim_min, us_per_step, lw=0.8, color="tab:blue")
    cost_ax.set_ylabel("CPU us per step")
    cost_ax.set_ylim(bottom=0)
    cost_ax.set_title(args.title)
    cost_ax.grid(alpha=0.3)
    times = [p["sim_time_s"] / 60 for p in points]
    rss_ax.plot(times, [p["rss_mb"] for p in points], color="tab:red", label="RSS (MB)")
    rss_ax.set_ylabel("RSS (MB)", color="tab:red")
    rss_ax.set_ylim(bottom=0)
    live_ax = rss_ax.twinx()
    live_ax.plot(times, [p["live"] for p in points], color="tab:green", lw=0.8)
    live_ax.set_ylabel("live requests (running + waiting)", color="tab:green")
    live_ax.set_ylim(bottom=0)
    rss_ax.set_xlabel("simulated time (min)")
    rss_ax.grid(alpha=0.3)
    if args.arrivals_end_s is not None:
        for ax in (cost_ax, rss_ax):
            ax.axvline(args.arrivals_end_s / 60, color="grey", ls="--", lw=0.8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
