#!/usr/bin/env python3
"""Replay speed of the reference engine: simulated seconds per wall second, per-step cost
with and without invariants (bare: the hash-model executor, no shadow KV, no checks; the
same schedule and fingerprint), and peak memory. Not a test: a benchmark to read side by side.

Default: the whole Mooncake conversation trace (traces/corpus/real, xz) at block size 16
through the reference engine (hashed block manager) in the default deployment (Llama-3.1-8B
on one H100 80GB). Both runs (every invariant, then the bare loop) happen in this one process,
one after the other, so their ratio is measured under the same machine load. CPU time
(process_time) is reported beside wall time: these machines are shared and noisy.
`--pairs N` runs N such pairs, alternately, and reports each pair's ratio and their median:
a single pair moves by 10-40 % between runs here (for the ratio to about 1 %, the two
runs taking turns every few simulated seconds: bench/replay_lockstep.py). A child process
first replays 30 requests through a small pool, untimed, so that a fresh tree compiles its
kernels there (`--no-warmup`: not). The first pair is cold all the same (its checked run
loads the compiled kernels, about 0.3 s: `invariant_overhead_first`); the later ones are
not, so the median is nearer the per-step cost of a long replay. The peak RSS is the
first checked run's, before any other run.

    python bench/replay_speed.py                      # the whole trace (long)
    python bench/replay_speed.py --max-requests 1000  # a window
    python bench/replay_speed.py --json
    python bench/replay_speed.py --max-requests 1000 --pairs 5   # median of five ratios
    python bench/replay_speed.py --max-requests 1000 --num-blocks 200000  # a bigger pool

Goals (issue 30): every invariant within 1.3x of the bare loop's CPU time; the whole trace
(12,031 requests) at >= 50x real time per CPU second with every invariant (100x the
stretch goal), and its peak RSS within 1.5x of the peak after its first 1,000 requests
(`--rss-at-requests`). `--curve FILE` writes the checked run's samples as it goes (see
bench/plot_replay_curve.py). The block pool is checked every step (incrementally;
`pool_sweeps` counts the full sweeps). The load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from replay_phases import WARMUP_NUM_BLOCKS, WARMUP_REQUESTS  # replayed first, in a child

from schedcheck.sim.deployment import LLAMA3_8B_H100
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces import iter_trace

TRACE = (
    Path(__file__).resolve().parents[1] / "traces/corpus/real/mooncake/conversation_trace.jsonl.xz"
)


def measure(args: argparse.Namespace, check_invariants: bool) -> dict[str, float]:
    config = LLAMA3_8B_H100.engine_config(
        args.block_size, block_manager=args.block_manager, num_gpu_blocks=args.num_blocks
    )
    requests = iter_trace(
        args.trace,
        "mooncake",
        max_requests=args.max_requests,
        duration_s=args.duration_s,
        time_scale=args.time_scale,
    )
    executor = "symbolic" if check_invariants else "hash"  # bare: no shadow KV either
    options = SimOptions(
        check_invariants=check_invariants, executor=executor, progress=args.progress
    )
    sim = Simulation(requests, "reference", config, options, LLAMA3_8B_H100.cost_model())
    curve = Curve(sim, args.rss_at_requests, args.curve) if check_invariants else None
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = sim.run()
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    assert not result.violations, [v.headline() for v in result.violations[:3]]
    extra: dict[str, object] = {}
    if curve is not None:
        extra = {
            "peak_rss_mb": peak_rss_mb(),
            f"peak_rss_mb_at_{args.rss_at_requests}_requests": curve.rss_at_requests_mb,
            "live_max": curve.live_max,
        }
        curve.close()
    return extra | {
        "requests": result.requests,
        "finished": result.finished,
        "steps": result.steps,
        "sim_time_s": result.sim_time_s,
        "wall_time_s": wall_s,
        "cpu_time_s": cpu_s,
        "sim_per_cpu": result.sim_time_s / cpu_s,
        "step_cpu_us": 1e6 * cpu_s / max(result.steps, 1),
        "invariants_checked": result.invariants_checked,
        "num_gpu_blocks": config.num_gpu_blocks,
        "pool_sweeps": sim.pool.num_sweeps,
        "fingerprint": result.fingerprint,
    }


def warm_kernels(args: argparse.Namespace) -> float:
    """Replay the trace's first WARMUP_REQUESTS requests through a pool of WARMUP_NUM_BLOCKS
    blocks, checked and bare, in a child process, so that a fresh tree compiles its
    kernels there (numba keeps them on disk), not inside the measured runs' CPU time and
    peak RSS (LLVM's: about 20 s and 160 MB on a fresh clone). Returns the child's CPU s."""
    command = [
        sys.executable, __file__, "--trace", args.trace, "--block-size", str(args.block_size),
        "--block-manager", args.block_manager, "--max-requests", str(WARMUP_REQUESTS),
        "--num-blocks", str(WARMUP_NUM_BLOCKS), "--no-warmup", "--json",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def run_pairs(args: argparse.Namespace) -> dict[str, Any]:
    """`args.pairs` pairs of runs, each the checked run then the bare one; the figures of
    the first pair, every pair's CPU-time ratio and their median."""
    pairs = []
    later = argparse.Namespace(**{**vars(args), "curve": None})  # the curve: the first run's
    peak_mb = 0.0
    for i in range(args.pairs):  # bounded: --pairs
        full = measure(args if i == 0 else later, check_invariants=True)
        peak_mb = peak_mb or peak_rss_mb()  # the first checked run's: the process's first
        bare = None if args.invariants_only else measure(args, check_invariants=False)
        if bare is not None:
            assert bare["fingerprint"] == full["fingerprint"], "invariants must not change it"
        pairs.append((full, bare))
        gc.collect()  # a run's cycles (the curve holds its simulation) freed before the next
    full, bare = pairs[0]
    at = full.get(f"peak_rss_mb_at_{args.rss_at_requests}_requests")
    # CPU time ratios (none with --invariants-only: no bare run)
    ratios = [f["cpu_time_s"] / b["cpu_time_s"] for f, b in pairs if b is not None]
    return {
        "bare": bare,
        "invariants": full,
        "invariant_overhead": statistics.median(ratios) if ratios else None,
        "invariant_overhead_first": ratios[0] if ratios else None,
        "invariant_overhead_pairs": ratios,
        "faster_than_real_time_cpu": full["sim_per_cpu"],
        "peak_rss_mb": peak_mb,
        f"peak_rss_mb_at_{args.rss_at_requests}_requests": at,
        "peak_rss_growth": peak_mb / at if at else None,
        "load_average": os.getloadavg(),
        "goals": {
            "invariant_overhead_max": 1.3,
            "faster_than_real_time_cpu_min": 50.0,
            "peak_rss_growth_max": 1.5,
        },
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Resident set size now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


class Curve:
    """Samples the run as it goes, every SAMPLE_STEPS recorded steps: simulated time, CPU
    time, requests released / live / retired, RSS (written to `path` as JSON lines as it
    goes); and the peak RSS when the `at_requests`-th request was released."""

    SAMPLE_STEPS = 512

    def __init__(self, sim: Simulation, at_requests: int, path: str | None = None) -> None:
        self.sim, self.at_requests = sim, at_requests
        self.out = open(path, "w") if path else None  # noqa: SIM115 - written as it goes
        self.rss_at_requests_mb: float | None = None
        self.live_max = 0
        self.cpu0 = time.process_time()
        self._record = sim._record
        sim._record = self.record  # type: ignore[method-assign]

    def record(self, output) -> None:
        self._record(output)
        sim = self.sim
        num_released = len(sim.arrivals.released)
        if self.rss_at_requests_mb is None and num_released >= self.at_requests:
            self.rss_at_requests_mb = peak_rss_mb()
        steps = sim.fingerprint.num_steps
        if steps % self.SAMPLE_STEPS:
            return
        live = len(sim.ledger.live)
        self.live_max = max(self.live_max, live)
        res = sim.result
        point = {
            "steps": steps,
            "sim_time_s": float(sim.env.now),
            "cpu_time_s": time.process_time() - self.cpu0,
            "released": num_released,
            "live": live,
            "retired": res.finished + res.aborted + res.rejected,
            "rss_mb": rss_mb(),
            "peak_rss_mb": peak_rss_mb(),  # a peak between two samples shows here
        }
        if self.out is not None:
            self.out.write(json.dumps(point) + "\n")
            self.out.flush()

    def close(self) -> None:
        if self.out is not None:
            self.out.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--max-requests", type=int, default=None)
    parser.add_argument("--duration-s", type=float, default=None)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--block-manager", default="hashed")
    parser.add_argument("--num-blocks", type=int, default=None, help="default: the deployment's")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--invariants-only", action="store_true", help="skip the bare run (long traces)"
    )
    parser.add_argument(
        "--curve", default=None, help="write the checked run's samples here (JSON lines)"
    )
    parser.add_argument(
        "--rss-at-requests", type=int, default=1000, help="also report the peak RSS then"
    )
    parser.add_argument(
        "--pairs", type=int, default=1, help="checked and bare runs, alternately (median ratio)"
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="no warm-up child first: kernels numba's cache lacks compile inside the first run",
    )
    args = parser.parse_args()
    if args.pairs < 1 or (args.invariants_only and args.pairs > 1):
        parser.error("--pairs must be >= 1, and 1 with --invariants-only")
    warmup_cpu_s = None if args.no_warmup else warm_kernels(args)
    report = run_pairs(args) | {"warmup_cpu_s": warmup_cpu_s}
    full, bare = report["invariants"], report["bare"]
    peak_mb, at = report["peak_rss_mb"], report[f"peak_rss_mb_at_{args.rss_at_requests}_requests"]
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return 0
    for name, r in (("bare", bare), ("invariants", full)):
        if r is None:  # --invariants-only
            continue
        print(
            f"{name:10s} {r['requests']} requests, {r['steps']} steps, {r['sim_time_s']:.0f} s "
            f"simulated in {r['cpu_time_s']:.1f} s CPU ({r['wall_time_s']:.1f} s wall): "
            f"{r['sim_per_cpu']:.1f}x real time, {r['step_cpu_us']:.0f} us/step "
            f"({r['num_gpu_blocks']} blocks, {r['pool_sweeps']} full pool sweeps)"
        )
    overhead = report["invariant_overhead"]
    overhead_text = (
        "" if overhead is None else f"invariant overhead {overhead:.2f}x (goal <= 1.3x), "
    )
    if args.pairs > 1:
        ratios = ", ".join(f"{r:.2f}x" for r in report["invariant_overhead_pairs"])
        print(f"{args.pairs} pairs, alternately: {ratios}; the median below")
    if warmup_cpu_s is not None:
        print(f"kernels warmed first in a child process ({warmup_cpu_s:.1f} s CPU, not counted)")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    growth = ""
    if at:  # None where the run saw fewer requests
        ratio = report["peak_rss_growth"]
        growth = f" ({ratio:.2f}x the {at:.0f} MB after {args.rss_at_requests} requests)"
    print(
        f"{overhead_text}{full['sim_per_cpu']:.1f}x real "
        f"time per CPU second (goal >= 50x), peak RSS {peak_mb:.0f} MB"
        f"{growth}; load average {load}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
