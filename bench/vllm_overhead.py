"""Per-step cost of vLLM's bare scheduler, the vllm-v1 adapter and the whole harness, in
one run.

The same Mooncake window (default: 1,800 s + 120 s at --time-scale 0.28) goes through vLLM
0.33's real v1 Scheduler (built the same way, by `engines/vllm/v1/build.py`) three ways,
with a fixed `--step-ms` per step (arrivals added before each step, a jump to the next
arrival when idle):

    bare:     Scheduler.schedule() + Scheduler.update_from_output(so, ModelRunnerOutput)
    adapter:  VllmV1Engine.schedule()            (vLLM schedule + mapping to our output)
              + VllmV1Engine.update_from_output() (ModelRunnerOutput built + vLLM update)
    harness:  the whole `schedcheck replay --engine vllm-v1` loop (sim/loop.py: SimPy clock
              with the same step time, symbolic executor, every invariant every step, the
              block pool incrementally), timed whole with process_time; vLLM's import is
              not counted (the bare run imported it)

The bare and adapter runs time only those calls (perf_counter_ns) and sample the same
token for the same request at the same step, so their schedules must be identical
(checked). The harness samples the hash model's tokens on a SimPy clock, so its step count
can differ a little: it is compared per step, to bare vLLM's mean step. With `--repeat N`
the runs alternate N times and the fastest is kept. With several `--num-blocks`, each pool
size is measured in turn in this process and the harness/bare ratios compared (goals:
within 1.5x, changing by < 10 % between sizes). The load average is printed beside.

    .tox/vllm-v1/bin/python bench/vllm_overhead.py                # 20,000 and 200,000 blocks
    .tox/vllm-v1/bin/python bench/vllm_overhead.py --num-blocks 200000 --no-harness --json
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import inspect
import json
import os
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from replay_phases import WARMUP_NUM_BLOCKS, WARMUP_REQUESTS  # the replays' warm-up

from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.traces.load import iter_trace

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[1] / "traces/corpus/real/mooncake/conversation_trace.jsonl.xz"
)
TOKEN_LO, TOKEN_SPAN = 3, 31_000


@dataclass
class RunTimes:
    """Per step: time (ns) of the timed calls, and the schedule (request, tokens) pairs."""

    step_ns: list[int] = field(default_factory=list)
    cpu_ns: int = 0  # CPU time (process_time) of the timed calls, all steps
    add_cpu_ns: int = 0  # bare run: CPU time of Request() + add_request (prompt hashing)
    inner_ns: list[int] = field(default_factory=list)  # adapter run: vLLM's own calls only
    schedule: list[tuple[tuple[str, int], ...]] = field(default_factory=list)
    running: list[int] = field(default_factory=list)


def stand_in_token(step: int, index: int) -> int:
    """The token a request samples at a step: a fixed integer mix, same in both runs."""
    return TOKEN_LO + (step * 7919 + index * 104_729) % TOKEN_SPAN


def load_requests(args: argparse.Namespace) -> list[EngineRequest]:
    reqs = []
    for i, tr in enumerate(
        iter_trace(
            args.trace,
            time_scale=args.time_scale,
            start_s=args.start_s,
            duration_s=args.duration_s,
            max_requests=args.max_requests,
        )
    ):
        out_len = max(1, min(tr.output_length, args.output_cap or tr.output_length))
        prompt = tr.own_prompt_tokens()
        prompt.flags.writeable = False
        reqs.append(EngineRequest(f"r{i}", prompt, out_len, arrival_time_s=tr.arrival_time_s))
    return reqs


def engine_config(args: argparse.Namespace, reqs: list[EngineRequest]) -> EngineConfig:
    bs = args.block_size
    longest = max(r.num_prompt_tokens + r.max_tokens for r in reqs)
    max_model_len = max(2048, -(-(longest + 1) // bs) * bs)
    return EngineConfig(
        block_size=bs,
        num_gpu_blocks=args.num_blocks[0],
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        max_model_len=max_model_len,
    )


class VirtualClock:
    """Arrivals by virtual time: `step_ms` per step, a jump to the next arrival when idle."""

    def __init__(self, reqs: list[EngineRequest], step_ms: float) -> None:
        self.pending = deque(reqs)
        self.now_s = 0.0
        self.step_s = step_ms / 1000.0

    def due(self, idle: bool) -> list[EngineRequest]:
        if idle and self.pending and self.pending[0].arrival_time_s > self.now_s:
            self.now_s = self.pending[0].arrival_time_s
        out = []
        while self.pending and self.pending[0].arrival_time_s <= self.now_s:
            out.append(self.pending.popleft())
        return out

    def tick(self) -> None:
        self.now_s += self.step_s


def run_bare(config: EngineConfig, reqs: list[EngineRequest], args) -> RunTimes:
    """vLLM's own loop: schedule() + update_from_output() with a fake runner output."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    from schedcheck.engines.vllm.v1.build import build_scheduler

    built = build_scheduler(config)
    sched, index = built.scheduler, {r.request_id: i for i, r in enumerate(reqs)}
    clock, times, perf = VirtualClock(reqs, args.step_ms), RunTimes(), time.perf_counter_ns
    cpu = time.process_time_ns
    # vLLM 0.34 dropped ModelRunnerOutput.req_id_to_index
    has_index = "req_id_to_index" in inspect.signature(ModelRunnerOutput).parameters
    _freeze_gc()
    for step in range(1, args.steps_max + 1):
        idle = not sched.has_unfinished_requests()
        if idle and not clock.pending:
            break
        a0 = cpu()
        for r in clock.due(idle):
            params = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
            sched.add_request(
                Request(r.request_id, r.prompt_token_ids.tolist(), params, None,
                        arrival_time=r.arrival_time_s, block_hasher=built.block_hasher)
            )  # fmt: skip
        times.add_cpu_ns += cpu() - a0
        c0, t0 = cpu(), perf()
        so = sched.schedule()
        t1, c1 = perf(), cpu()
        ids = list(so.num_scheduled_tokens)
        sampled = [
            [stand_in_token(step, index[rid])] if _prompt_done(sched.requests[rid]) else []
            for rid in ids
        ]
        extra = {"req_id_to_index": {r: i for i, r in enumerate(ids)}} if has_index else {}
        mro = ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled, **extra)
        c2, t2 = cpu(), perf()
        sched.update_from_output(so, mro)
        t3, c3 = perf(), cpu()
        times.step_ns.append((t1 - t0) + (t3 - t2))
        times.cpu_ns += (c1 - c0) + (c3 - c2)
        times.schedule.append(tuple(so.num_scheduled_tokens.items()))
        times.running.append(len(sched.running))
        clock.tick()
    gc.unfreeze()
    return times


def _prompt_done(request) -> bool:
    return request.num_computed_tokens >= request.num_tokens


def run_adapter(config: EngineConfig, reqs: list[EngineRequest], args) -> RunTimes:
    """The same loop through the Engine protocol."""
    from schedcheck.engines.vllm.v1.adapter import VllmV1Engine

    engine, index = VllmV1Engine(config), {r.request_id: i for i, r in enumerate(reqs)}
    clock, times, perf = VirtualClock(reqs, args.step_ms), RunTimes(), time.perf_counter_ns
    inner = _time_inner_calls(engine.scheduler, perf)
    _freeze_gc()
    for step in range(1, args.steps_max + 1):
        idle = not engine.has_unfinished_requests()
        if idle and not clock.pending:
            break
        for r in clock.due(idle):
            engine.add_request(r)
        t0 = perf()
        out = engine.schedule()
        t1 = perf()
        tokens = {
            r.request_id: stand_in_token(step, index[r.request_id])
            for r in out.scheduled
            if r.samples
        }
        t2 = perf()
        engine.update_from_output(out, tokens)
        t3 = perf()
        times.step_ns.append((t1 - t0) + (t3 - t2))
        times.inner_ns.append(inner[0])
        inner[0] = 0
        times.schedule.append(tuple((r.request_id, r.num_scheduled_tokens) for r in out.scheduled))
        times.running.append(len(engine.scheduler.running))
        clock.tick()
    gc.unfreeze()
    return times


def _time_inner_calls(scheduler, perf) -> list[int]:
    """Wrap the scheduler's schedule/update_from_output to time them inside the adapter's
    calls: the bare cost of the very same steps, in the same run (the wrappers' own cost is
    counted as adapter overhead)."""
    acc = [0]

    def timed(fn):
        def call(*args):
            t0 = perf()
            try:
                return fn(*args)
            finally:
                acc[0] += perf() - t0

        return call

    scheduler.schedule = timed(scheduler.schedule)
    scheduler.update_from_output = timed(scheduler.update_from_output)
    return acc


def _freeze_gc() -> None:
    """As vLLM's EngineCore does after start-up: collect, then freeze what survives."""
    gc.collect()
    gc.freeze()


def run_harness(config: EngineConfig, reqs: list[EngineRequest], args) -> dict:
    """The whole harness on the same requests: schedcheck's loop with every invariant."""
    from schedcheck.sim.cost_model import StepCostModel
    from schedcheck.sim.loop import SimOptions, Simulation
    from schedcheck.traces.schema import TraceRequest

    trace = [
        TraceRequest(r.request_id, r.arrival_time_s, r.max_tokens,
                     prompt_token_ids=tuple(r.prompt_token_ids.tolist()))
        for r in reqs
    ]  # fmt: skip
    cost = StepCostModel("fixed", args.step_ms * 1000.0, 0.0, 0.0, 0.0)
    sim = Simulation(trace, "vllm-v1", config, SimOptions(steps_max=args.steps_max), cost)
    _freeze_gc()
    cpu0 = time.process_time()
    result = sim.run()
    cpu_s = time.process_time() - cpu0
    gc.unfreeze()
    assert not result.violations, [v.headline() for v in result.violations[:3]]
    return dict(steps=result.steps, cpu_s=cpu_s, pool_sweeps=sim.pool.num_sweeps,
                fingerprint=result.fingerprint)  # fmt: skip


def fastest(runs: list[RunTimes]) -> list[int]:
    return [min(v) for v in zip(*(r.step_ns for r in runs), strict=True)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reqs = load_requests(args)
    if not reqs:
        print("error: no requests in the window", file=sys.stderr)
        return 2
    if not args.no_harness:  # untimed: a fresh tree compiles the harness's kernels here
        # (its first timed run did: 6.95x where the next run read 3.39x)
        warm = dataclasses.replace(engine_config(args, reqs), num_gpu_blocks=WARMUP_NUM_BLOCKS)
        run_harness(warm, reqs[:WARMUP_REQUESTS], args)
    reports = []
    for num_blocks in args.num_blocks:
        config = dataclasses.replace(engine_config(args, reqs), num_gpu_blocks=num_blocks)
        bare_runs, adapter_runs, harness_runs = [], [], []
        for _ in range(args.repeat):
            bare_runs.append(run_bare(config, reqs, args))
            adapter_runs.append(run_adapter(config, reqs, args))
            if not args.no_harness:
                harness_runs.append(run_harness(config, reqs, args))
        for run in bare_runs[1:] + adapter_runs:
            if run.schedule != bare_runs[0].schedule:
                print("error: the adapter's schedule differs from vLLM's bare run", file=sys.stderr)
                return 1
        reports.append(summarize(args, config, reqs, bare_runs, adapter_runs, harness_runs))
    out: dict = {"runs": reports, "uptime": os.getloadavg()}
    if len(reports) > 1 and not args.no_harness:
        ratios = [r["harness_ratio"] for r in reports]
        out["harness_ratio_change"] = round(max(ratios) / min(ratios) - 1, 3)
    print(json.dumps(out) if args.json else "\n".join(map(render, reports)) + _render_change(out))
    return 0


def _render_change(out: dict) -> str:
    load = ", ".join(f"{x:.2f}" for x in out["uptime"])
    change = out.get("harness_ratio_change")
    text = f"\nload average {load}"
    if change is not None:
        text += f"; harness/bare ratio changes by {100 * change:.1f} % across pool sizes"
        text += " (goal < 10 %)"
    return text


def summarize(args, config, reqs, bare_runs, adapter_runs, harness_runs) -> dict:
    bare, adapter = fastest(bare_runs), fastest(adapter_runs)
    harness = {}
    if harness_runs:
        best = min(harness_runs, key=lambda h: h["cpu_s"])
        bare_us = min(r.cpu_ns / len(r.step_ns) for r in bare_runs) / 1e3  # CPU, like harness
        add_us = min(r.add_cpu_ns / len(r.step_ns) for r in bare_runs) / 1e3
        harness_us = 1e6 * best["cpu_s"] / best["steps"]
        harness = dict(
            harness_steps=best["steps"],
            harness_us_per_step=round(harness_us, 1),
            harness_pool_sweeps=best["pool_sweeps"],
            bare_cpu_us_per_step=round(bare_us, 1),
            harness_ratio=round(harness_us / bare_us, 3),
            # vLLM's own request construction (prompt block hashing) counted on the bare side
            harness_ratio_with_add=round(harness_us / (bare_us + add_us), 3),
        )
    ratios = [a / b for a, b in zip(adapter, bare, strict=True) if b > 0]
    split = min(adapter_runs, key=lambda r: sum(r.step_ns))  # the quietest adapter run
    inner_total, outer_total = sum(split.inner_ns), sum(split.step_ns)
    import vllm

    return dict(
        engine=f"vllm-v1 {vllm.__version__}",
        trace=str(args.trace),
        requests=len(reqs),
        steps=len(bare),
        repeat=args.repeat,
        num_gpu_blocks=config.num_gpu_blocks,
        max_num_batched_tokens=config.max_num_batched_tokens,
        mean_running=round(statistics.fmean(bare_runs[0].running), 1),
        bare_us_median=round(statistics.median(bare) / 1e3, 1),
        adapter_us_median=round(statistics.median(adapter) / 1e3, 1),
        bare_us_mean=round(statistics.fmean(bare) / 1e3, 1),
        adapter_us_mean=round(statistics.fmean(adapter) / 1e3, 1),
        same_run_vllm_us_mean=round(inner_total / len(split.inner_ns) / 1e3, 1),
        same_run_adapter_us_mean=round(outer_total / len(split.step_ns) / 1e3, 1),
        same_run_ratio=round(outer_total / inner_total, 3),
        ratio_of_totals=round(sum(adapter) / sum(bare), 3),
        ratio_median_per_step=round(statistics.median(ratios), 3),
        goal=1.5,
        **harness,
    )


def render(r: dict) -> str:
    harness = ""
    if "harness_ratio" in r:
        harness = (
            f"\n  harness (every invariant, every step): {r['harness_us_per_step']} us CPU per "
            f"step over {r['harness_steps']} steps ({r['harness_pool_sweeps']} full pool sweeps)"
            f" -> {r['harness_ratio']}x of bare vLLM's {r['bare_cpu_us_per_step']} us CPU per "
            f"step (goal <= {r['goal']}x); {r['harness_ratio_with_add']}x with vLLM's "
            "Request construction and add_request counted on the bare side too"
        )
    return (
        f"[{r['num_gpu_blocks']} blocks] {r['engine']}: {r['requests']} requests, "
        f"{r['steps']} steps, mean running {r['mean_running']} "
        f"(fastest of {r['repeat']} alternating runs per step)\n"
        f"  bare    schedule+update: median {r['bare_us_median']} us, "
        f"mean {r['bare_us_mean']} us\n"
        f"  adapter schedule+update: median {r['adapter_us_median']} us, "
        f"mean {r['adapter_us_mean']} us\n"
        f"  separate runs: {r['ratio_of_totals']}x of total time, "
        f"{r['ratio_median_per_step']}x median per step\n"
        f"  same run (vLLM calls timed inside the adapter): "
        f"vLLM {r['same_run_vllm_us_mean']} us, adapter {r['same_run_adapter_us_mean']} us "
        f"per step -> overhead ratio {r['same_run_ratio']}x (goal <= {r['goal']}x)" + harness
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--start-s", type=float, default=1800.0)
    ap.add_argument("--duration-s", type=float, default=120.0)
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--time-scale", type=float, default=0.28)
    ap.add_argument("--output-cap", type=int, default=None)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--no-harness", action="store_true", help="adapter vs bare only")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--steps-max", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
