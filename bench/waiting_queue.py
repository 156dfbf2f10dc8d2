#!/usr/bin/env python3
"""Does a checked step cost more while many requests wait? A burst of `--requests`
arrivals at time 0 (distinct 40-token prompts, 4 output tokens each) drains through an
engine that runs at most 8 at once, with every invariant; the steps are cut into tenths
and each tenth's CPU per step is printed beside its mean number of unfinished requests
(waiting + at most 8 running). A step must cost O(tokens scheduled + blocks changed)
(issue 30): flat from the first tenth (thousands waiting) to the last (a few hundred).
The first tenth also holds the engine's warm-up. The total CPU counts the arrivals too:
an arrival must cost O(1), not a walk of the queue.

    python bench/waiting_queue.py --engine reference --requests 8000
    .tox/vllm-v1/bin/python bench/waiting_queue.py --engine vllm-v1 --json
    .tox/sglang/bin/python bench/waiting_queue.py --engine sglang --requests 3000
    .tox/sglang/bin/python bench/waiting_queue.py --engine sglang --requests 200 \
        --num-gpu-blocks 65536      # nor with the KV pool: O(changed), not O(pool)

Not a test: numbers to read side by side (two commits one after the other), with the
load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, Simulation
from schedcheck.traces.schema import TraceRequest

PROMPT_TOKENS = 40
VOCAB_SPAN = 30_000  # token ids 3 .. 30_002
CONFIG = EngineConfig(block_size=16, num_gpu_blocks=4096, max_num_batched_tokens=512,
                      max_num_seqs=8, max_model_len=256)  # fmt: skip


def burst(num_requests: int) -> list[TraceRequest]:
    """Every request arrives at 0 with a prompt of its own (no prefix is shared)."""
    return [
        TraceRequest(
            f"r{i}",
            0.0,
            4,
            prompt_token_ids=tuple((41 * i + j) % VOCAB_SPAN + 3 for j in range(PROMPT_TOKENS)),
        )
        for i in range(num_requests)
    ]


def measure(
    engine: str, num_requests: int, num_gpu_blocks: int = CONFIG.num_gpu_blocks
) -> dict[str, object]:
    config = dataclasses.replace(CONFIG, num_gpu_blocks=num_gpu_blocks)
    sim = Simulation(burst(num_requests), engine, config, SimOptions(), profile("unit"))
    samples: list[tuple[float, int]] = []  # (CPU s, unfinished requests) at each step
    update = sim.fingerprint.update

    def timed(output):  # the loop records every step that ran through its fingerprint
        samples.append((time.process_time(), len(sim.ledger.live)))
        return update(output)

    sim.fingerprint.update = timed
    cpu0 = time.process_time()
    result = sim.run()
    cpu_s = time.process_time() - cpu0
    assert not result.violations, [v.headline() for v in result.violations[:3]]
    assert len(samples) >= 11, "too few steps to cut into tenths: more --requests"
    bounds = [k * (len(samples) - 1) // 10 for k in range(11)]  # step indices
    tenths = []
    for lo, hi in itertools.pairwise(bounds):  # bounded: ten tenths
        (t0, _), (t1, _) = samples[lo], samples[hi]
        unfinished = sum(n for _, n in samples[lo:hi]) / (hi - lo)
        tenths.append({"steps": [lo, hi], "mean_unfinished": round(unfinished),
                       "us_per_step": round(1e6 * (t1 - t0) / (hi - lo))})  # fmt: skip
    return {
        "engine": engine,
        "requests": num_requests,
        "num_gpu_blocks": num_gpu_blocks,
        "finished": result.finished,
        "steps": result.steps,
        "cpu_s": round(cpu_s, 2),
        "tenths": tenths,
        "first_to_last_tenth": round(tenths[0]["us_per_step"] / tenths[-1]["us_per_step"], 2),
        "load_average": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="reference")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--num-gpu-blocks", type=int, default=CONFIG.num_gpu_blocks,
                        help="KV pool size in blocks (of 16 tokens)")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.engine, args.requests, args.num_gpu_blocks)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['engine']}: {report['requests']} arrivals at once, "
          f"{report['num_gpu_blocks']} blocks, {report['steps']} steps, "
          f"{report['cpu_s']} s CPU")  # fmt: skip
    for t in report["tenths"]:
        lo, hi = t["steps"]
        print(f"  steps {lo:6d}-{hi:6d}  {t['mean_unfinished']:6d} unfinished  "
              f"{t['us_per_step']:7d} us/step")  # fmt: skip
    load = ", ".join(f"{x:.2f}" for x in report["load_average"])
    print(f"first tenth / last tenth: {report['first_to_last_tenth']}x; load average {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
