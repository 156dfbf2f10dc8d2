"""Per-step cost of the reference engine: schedule() + update_from_output(), nothing else.

Mooncake-like load, closed loop: `--concurrency` requests are in the engine at all times
(a finished one is replaced at once by a new arrival), prompts are built from 512-token
"hash id" blocks like the Mooncake trace (every prompt starts with block 0, many share a
conversation prefix, the rest is unique), mean prompt about 12k tokens, outputs 50..600
tokens, block size 16, token budget 8192. After a warm-up (every slot admitted once) the
next `--steps` steps are timed with perf_counter_ns; token sampling and request generation
happen outside the timed region.

The peer figure (vLLM 0.33's own Scheduler + KVCacheManager timed alone on a Mooncake
window with fake model outputs; bench/vllm_overhead.py measures it here), same kind of
load: 0.6-1.35 ms per step at about 64 running requests (median 991 us at 65
running, 4.6 ms at 236 running, +-25% run to run).

    python bench/engine_step_cost.py                 # 64 and 256, both block managers
    python bench/engine_step_cost.py --json --concurrency 64 --block-manager hashed
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator

import numpy as np

from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.engines.reference.engine import make_engine

HASH_BLOCK_TOKENS = 512  # Mooncake: one hash id per 512 prompt tokens
VOCAB_SIZE = 32_000


class MooncakeLikeRequests:
    """An endless, seeded stream of Mooncake-like requests."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self._blocks: dict[int, np.ndarray] = {}
        self._next_hash_id = 1_000
        self._conversations: list[list[int]] = []
        self._count = 0

    def _block(self, hash_id: int) -> np.ndarray:
        block = self._blocks.get(hash_id)
        if block is None:
            block = np.random.default_rng(hash_id).integers(0, VOCAB_SIZE, HASH_BLOCK_TOKENS)
            self._blocks[hash_id] = block
        return block

    def _fresh_ids(self, count: int) -> list[int]:
        ids = list(range(self._next_hash_id, self._next_hash_id + count))
        self._next_hash_id += count
        return ids

    def __iter__(self) -> Iterator[EngineRequest]:
        return self

    def __next__(self) -> EngineRequest:
        rng = self._rng
        input_length = int(np.clip(rng.lognormal(np.log(9_000), 0.6), 600, 32_000))
        num_hash_blocks = -(-input_length // HASH_BLOCK_TOKENS)
        hash_ids = [0]
        if self._conversations and rng.random() < 0.45:  # continue a conversation
            prefix = self._conversations[int(rng.integers(len(self._conversations)))]
            hash_ids += prefix[: num_hash_blocks - 1]
        hash_ids += self._fresh_ids(num_hash_blocks - len(hash_ids))
        if len(self._conversations) < 200:
            self._conversations.append(hash_ids[1:])
        else:
            self._conversations[int(rng.integers(200))] = hash_ids[1:]
        prompt = np.concatenate([self._block(h) for h in hash_ids])[:input_length]
        prompt = prompt.astype(np.int64)
        prompt.flags.writeable = False
        self._count += 1
        return EngineRequest(
            request_id=f"req-{self._count}",
            prompt_token_ids=prompt,
            max_tokens=int(rng.integers(50, 600)),
        )


def measure(
    concurrency: int, block_manager: str, num_steps: int, seed: int, num_gpu_blocks: int
) -> dict[str, object]:
    config = EngineConfig(
        block_size=16,
        num_gpu_blocks=num_gpu_blocks,
        max_num_batched_tokens=8192,
        max_num_seqs=max(256, concurrency),
        block_manager=block_manager,
    )
    engine = make_engine(config)
    source = MooncakeLikeRequests(seed)
    for _ in range(concurrency):
        engine.add_request(next(source))
    perf_ns = time.perf_counter_ns
    cpu_ns = time.process_time_ns
    costs_ns: list[int] = []
    cpu_costs_ns: list[int] = []
    add_costs_ns: list[int] = []
    running: list[int] = []
    num_warmup_steps = 0
    admitted = False
    while len(costs_ns) < num_steps:
        cpu_start, start = cpu_ns(), perf_ns()
        output = engine.schedule()
        middle, cpu_middle = perf_ns(), cpu_ns()
        sampled = {
            r.request_id: (r.num_end_tokens * 7919) % VOCAB_SIZE
            for r in output.scheduled
            if r.samples
        }
        cpu_middle_end, middle_end = cpu_ns(), perf_ns()
        finished = engine.update_from_output(output, sampled)
        end, cpu_end = perf_ns(), cpu_ns()
        if admitted:
            costs_ns.append((middle - start) + (end - middle_end))
            cpu_costs_ns.append((cpu_middle - cpu_start) + (cpu_end - cpu_middle_end))
            running.append(len(engine.scheduler.running))
        else:
            num_warmup_steps += 1
            admitted = not len(engine.scheduler.waiting)
        for _ in finished:
            new_request = next(source)
            add_start = perf_ns()
            engine.add_request(new_request)  # hashes the prompt, as vLLM's Request() does
            add_costs_ns.append(perf_ns() - add_start)
    costs_us = np.asarray(costs_ns, dtype=np.float64) / 1_000
    cpu_costs_us = np.asarray(cpu_costs_ns, dtype=np.float64) / 1_000
    add_costs_us = np.asarray(add_costs_ns or [0], dtype=np.float64) / 1_000
    return {
        "block_manager": block_manager,
        "concurrency": concurrency,
        "num_steps": num_steps,
        "num_warmup_steps": num_warmup_steps,
        "mean_running": float(np.mean(running)),
        "median_us": float(np.median(costs_us)),
        "p90_us": float(np.percentile(costs_us, 90)),
        "mean_us": float(np.mean(costs_us)),
        "cpu_median_us": float(np.median(cpu_costs_us)),
        "cpu_p90_us": float(np.percentile(cpu_costs_us, 90)),
        "add_request_median_us": float(np.median(add_costs_us)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, action="append", help="default: 64 and 256")
    parser.add_argument("--block-manager", choices=("hashed", "radix"), action="append")
    parser.add_argument("--steps", type=int, default=1500, help="timed steps per run")
    parser.add_argument("--num-gpu-blocks", type=int, default=220_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    args = parser.parse_args(argv)
    results = [
        measure(c, bm, args.steps, args.seed, args.num_gpu_blocks)
        for bm in args.block_manager or ("hashed", "radix")
        for c in args.concurrency or (64, 256)
    ]
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    print("per-step cost of schedule() + update_from_output(), microseconds")
    print(
        f"{'manager':8} {'conc':>5} {'running':>8} {'median':>8} {'p90':>8} {'mean':>8} "
        f"{'cpu med':>8} {'cpu p90':>8} {'add_req':>8}"
    )
    for r in results:
        print(
            f"{r['block_manager']:8} {r['concurrency']:>5} {r['mean_running']:>8.1f} "
            f"{r['median_us']:>8.0f} {r['p90_us']:>8.0f} {r['mean_us']:>8.0f} "
            f"{r['cpu_median_us']:>8.0f} {r['cpu_p90_us']:>8.0f} "
            f"{r['add_request_median_us']:>8.0f}"
        )
    print("(cpu = process time, less sensitive to other load on the machine; add_req = one")
    print(" add_request(), outside the step, where the prompt is hashed as in vLLM)")
    print("peer: vLLM v1 0.6-1.35 ms per step at ~64 running (median 991 us at 65, 4.6 ms at 236)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
