"""Per-step overhead of the vllm-v1 adapter over vLLM's bare scheduler, in one run.

The same Mooncake window goes twice through vLLM 0.33's real v1 Scheduler (built the same
way, by `engines/vllm/v1_build.py`), on a virtual clock (a fixed `--step-ms` per step,
arrivals added before each step, a jump to the next arrival when idle):

    bare:     Scheduler.schedule() + Scheduler.update_from_output(so, ModelRunnerOutput)
    adapter:  VllmV1Engine.schedule()            (vLLM schedule + mapping to our output)
              + VllmV1Engine.update_from_output() (ModelRunnerOutput built + vLLM update)

Only those calls are timed (perf_counter_ns); request construction, add_request and the
stand-in tokens are not. Both runs sample the same token for the same request at the same
step, so their schedules must be identical (checked: scheduled tokens of every request at
every step). With `--repeat N` the runs alternate N times and each step keeps its fastest
time. Prints the median and mean per-step cost of each and their ratio (goal <= 1.5x).

    .tox/vllm-v1/bin/python bench/vllm_overhead.py                # 120 s of the trace
    .tox/vllm-v1/bin/python bench/vllm_overhead.py --duration-s 600 --time-scale 0.28 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

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
        num_gpu_blocks=args.num_blocks,
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

    from schedcheck.engines.vllm.v1_build import build_scheduler

    built = build_scheduler(config)
    sched, index = built.scheduler, {r.request_id: i for i, r in enumerate(reqs)}
    clock, times, perf = VirtualClock(reqs, args.step_ms), RunTimes(), time.perf_counter_ns
    _freeze_gc()
    for step in range(1, args.steps_max + 1):
        idle = not sched.has_unfinished_requests()
        if idle and not clock.pending:
            break
        for r in clock.due(idle):
            params = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
            sched.add_request(
                Request(r.request_id, r.prompt_token_ids.tolist(), params, None,
                        arrival_time=r.arrival_time_s, block_hasher=built.block_hasher)
            )  # fmt: skip
        t0 = perf()
        so = sched.schedule()
        t1 = perf()
        ids = list(so.num_scheduled_tokens)
        sampled = [
            [stand_in_token(step, index[rid])] if _prompt_done(sched.requests[rid]) else []
            for rid in ids
        ]
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                sampled_token_ids=sampled)  # fmt: skip
        t2 = perf()
        sched.update_from_output(so, mro)
        t3 = perf()
        times.step_ns.append((t1 - t0) + (t3 - t2))
        times.schedule.append(tuple(so.num_scheduled_tokens.items()))
        times.running.append(len(sched.running))
        clock.tick()
    gc.unfreeze()
    return times


def _prompt_done(request) -> bool:
    return request.num_computed_tokens >= request.num_tokens


def run_adapter(config: EngineConfig, reqs: list[EngineRequest], args) -> RunTimes:
    """The same loop through the Engine protocol."""
    from schedcheck.engines.vllm_v1 import VllmV1Engine

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


def fastest(runs: list[RunTimes]) -> list[int]:
    return [min(v) for v in zip(*(r.step_ns for r in runs), strict=True)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reqs = load_requests(args)
    if not reqs:
        print("error: no requests in the window", file=sys.stderr)
        return 2
    config = engine_config(args, reqs)
    bare_runs, adapter_runs = [], []
    for _ in range(args.repeat):
        bare_runs.append(run_bare(config, reqs, args))
        adapter_runs.append(run_adapter(config, reqs, args))
    for run in bare_runs[1:] + adapter_runs:
        if run.schedule != bare_runs[0].schedule:
            print("error: the adapter's schedule differs from vLLM's bare run", file=sys.stderr)
            return 1
    report = summarize(args, config, reqs, bare_runs, adapter_runs)
    print(json.dumps(report) if args.json else render(report))
    return 0


def summarize(args, config, reqs, bare_runs, adapter_runs) -> dict:
    bare, adapter = fastest(bare_runs), fastest(adapter_runs)
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
    )


def render(r: dict) -> str:
    return (
        f"{r['engine']}: {r['requests']} requests, {r['steps']} steps, mean running "
        f"{r['mean_running']} (fastest of {r['repeat']} alternating runs per step)\n"
        f"  bare    schedule+update: median {r['bare_us_median']} us, mean {r['bare_us_mean']} us\n"
        f"  adapter schedule+update: median {r['adapter_us_median']} us, "
        f"mean {r['adapter_us_mean']} us\n"
        f"  separate runs: {r['ratio_of_totals']}x of total time, "
        f"{r['ratio_median_per_step']}x median per step\n"
        f"  same run (vLLM calls timed inside the adapter): vLLM {r['same_run_vllm_us_mean']} us,"
        f" adapter {r['same_run_adapter_us_mean']} us per step -> overhead ratio "
        f"{r['same_run_ratio']}x (goal <= {r['goal']}x)"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--start-s", type=float, default=0.0)
    ap.add_argument("--duration-s", type=float, default=120.0)
    ap.add_argument("--max-requests", type=int, default=None)
    ap.add_argument("--time-scale", type=float, default=0.28)
    ap.add_argument("--output-cap", type=int, default=None)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, default=200_000)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--steps-max", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
