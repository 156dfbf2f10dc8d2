"""`schedcheck replay`: a trace through an engine under test, every step checked.

Exit codes: 0 clean, 1 a violation (a bundle is written), 2 bad input, 3 liveness failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from schedcheck.cli.commands.common import (
    UsageError,
    add_json_flag,
    add_trace_input_args,
    non_negative_int,
    open_trace,
    positive_int,
    run_guarded,
)
from schedcheck.cli.output import emit_json
from schedcheck.engines.capabilities import (
    Capabilities,
    EngineRefusal,
    config_refusals,
    request_refusal,
)
from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig, parse_kv_groups
from schedcheck.engines.registry import EngineLoadError, capabilities
from schedcheck.sim.bundles import rerun_bundle, same_violations, save_bundle
from schedcheck.sim.cost_model import PROFILES
from schedcheck.sim.deployment import DEPLOYMENTS, LLAMA3_8B_H100
from schedcheck.sim.loop import EXIT_USAGE, RunResult, SimOptions, run
from schedcheck.traces.schema import TraceRequest

DEFAULT_TRACE = "mooncake_conversation_first200.jsonl"
DEFAULT_BUNDLES = Path(".schedcheck") / "bundles"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a trace through an engine under test, checking every step",
        description=(
            "Replay a trace through an engine under test on a simulated clock. Every step "
            "is checked: token accounting, the shadow-KV oracle (every KV read the attention "
            "kernel would do), the block pool, outputs against unchunked execution; then "
            "liveness. Without TRACE, replays the bundled first 200 requests of the Mooncake "
            "conversation trace. Defaults model Llama-3.1-8B on one H100 80GB."
        ),
        epilog="Exit codes: 0 clean, 1 violation (bundle written), 2 bad input, 3 liveness.",
    )
    add_trace_input_args(parser)
    add_engine_args(parser)
    add_cost_args(parser)
    sim = parser.add_argument_group("simulation")
    sim.add_argument("--seed", type=non_negative_int, default=0, help="seed (default 0)")
    sim.add_argument("--out", metavar="DIR", help="write a bundle of the run here (always)")
    sim.add_argument("--bundle", metavar="DIR", help="rerun a bundle instead of a trace")
    sim.add_argument("--steps-max", type=positive_int, default=10_000_000, metavar="N")
    sim.add_argument("--keep-going", action="store_true", help="go on after a violating step")
    sim.add_argument(
        "--no-invariants",
        action="store_true",
        help="run the bare loop (the shadow-KV executor still runs)",
    )
    sim.add_argument(
        "--executor",
        choices=("symbolic", "tensor"),
        default="symbolic",
        help="symbolic (shadow KV, default) or tensor (gpu/: a real model)",
    )
    sim.add_argument("--backend", default="torch-ref", help="tensor executor attention backend")
    sim.add_argument("--device", default="cpu", help="tensor executor device")
    sim.add_argument("--dtype", default="fp32", help="tensor executor dtype")
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def add_cost_args(parser: argparse.ArgumentParser) -> None:
    """The step cost model: a named profile and coefficient overrides (replay, fuzz, diff)."""
    sim = parser.add_argument_group("step cost model")
    sim.add_argument(
        "--cost-profile",
        choices=sorted(PROFILES),
        default=None,
        help="step cost model profile (default: the deployment's)",
    )
    sim.add_argument(
        "--cost",
        default="",
        metavar="K=V,...",
        help="override cost coefficients, e.g. fixed_us=4000,prefill_token_us=25",
    )


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Engine selection and vLLM-named options (shared with fuzz and diff)."""
    eng = parser.add_argument_group("engine under test")
    eng.add_argument(
        "--engine",
        default="reference",
        help="reference | vllm-v1 | vllm-v0 | package.module:factory",
    )
    eng.add_argument(
        "--block-manager",
        default=None,
        help="reference: hashed (default) | radix; vllm-v0: v1 | v2",
    )
    eng.add_argument(
        "--deployment",
        choices=sorted(DEPLOYMENTS),
        default=LLAMA3_8B_H100.name,
        help="the modelled deployment: KV capacity, limits, step cost",
    )
    eng.add_argument("--block-size", type=positive_int, default=16, metavar="N")
    eng.add_argument(
        "--num-gpu-blocks",
        type=positive_int,
        default=None,
        metavar="N",
        help="KV cache blocks (default: the deployment's capacity)",
    )
    eng.add_argument("--max-num-batched-tokens", type=positive_int, default=None, metavar="N")
    eng.add_argument("--max-num-seqs", type=positive_int, default=None, metavar="N")
    eng.add_argument("--max-model-len", type=positive_int, default=None, metavar="N")
    eng.add_argument(
        "--long-prefill-token-threshold", type=non_negative_int, default=None, metavar="N"
    )
    eng.add_argument(
        "--num-lookahead-tokens",
        type=non_negative_int,
        default=None,
        metavar="K",
        help="speculative decoding: K draft tokens per sampling request, whose KV the "
        "drafter writes past the request's tokens (default 0: off)",
    )
    eng.add_argument(
        "--num-speculative-tokens",
        type=non_negative_int,
        default=None,
        metavar="K",
        help="speculative decoding with acceptance: a drafter proposes K draft tokens per "
        "decoding request, the engine schedules them, the executor accepts the longest "
        "prefix the model agrees with plus a bonus token (default 0: off)",
    )
    eng.add_argument(
        "--draft-acceptance",
        type=_probability,
        default=0.7,
        metavar="P",
        help="with --num-speculative-tokens: the probability that each draft is the true "
        "next token (default 0.7)",
    )
    eng.add_argument(
        "--kv-groups",
        type=_kv_groups,
        default=None,
        metavar="full[,sliding:W...]",
        help="KV-cache groups: full (default), or a hybrid model such as full,sliding:128 "
        "(a sliding-window group of W tokens beside the full-attention one)",
    )
    eng.add_argument("--no-prefix-caching", action="store_true")
    eng.add_argument("--no-chunked-prefill", action="store_true")
    eng.add_argument("--mutant", default=None, help="switch on a named mutant (mutants list)")
    add_scheduler_option_args(eng)


def add_scheduler_option_args(eng: argparse._ArgumentGroup) -> None:
    """--policy, --async-scheduling, --vllm-option: scheduler options in EngineConfig.extra."""
    eng.add_argument(
        "--policy",
        choices=("fcfs", "priority"),
        default=None,
        help="scheduling policy (reference, vllm-v1, vllm-engine): priority runs lower trace "
        "`priority` "
        "values first, ties by arrival (default fcfs)",
    )
    eng.add_argument(
        "--async-scheduling",
        action="store_true",
        help="vllm-v1 (vLLM's AsyncScheduler), sglang (overlap scheduling) and reference: step "
        "N+1 is scheduled before step N's output reaches the engine (pipeline depth 2)",
    )
    eng.add_argument(
        "--vllm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="vllm-v1, vllm-engine: a SchedulerConfig field, e.g. watermark=0.1, "
        "max_num_scheduled_tokens=512, prefill_schedule_interval=2, max_num_queued_reqs=64 "
        "(repeatable; an unknown KEY is refused with the known ones)",
    )


def scheduler_option_extra(args: argparse.Namespace) -> dict[str, str]:
    """EngineConfig.extra for --policy, --async-scheduling and --vllm-option (UsageError on a
    bad option, or one the engine has no use for)."""
    extra: dict[str, str] = {}
    if args.policy is not None:
        extra["policy"] = args.policy
    if args.async_scheduling:
        extra[ASYNC_SCHEDULING_KEY] = "true"
    if args.vllm_option:
        if args.engine not in ("vllm-v1", "vllm-engine"):
            raise UsageError(
                f"--vllm-option is for --engine vllm-v1 or vllm-engine, not {args.engine!r}"
            )
        try:
            from schedcheck.engines.vllm.v1.options import options_extra, parse_option

            extra.update(options_extra(parse_option(text) for text in args.vllm_option))
        except ImportError as exc:
            raise UsageError(
                f"--vllm-option needs vLLM installed (tox -e vllm-v1): {exc}"
            ) from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return extra


def engine_config(args: argparse.Namespace) -> EngineConfig:
    deployment = DEPLOYMENTS[args.deployment]
    return deployment.engine_config(
        args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        num_lookahead_tokens=args.num_lookahead_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
        kv_groups=args.kv_groups,
        enable_prefix_caching=not args.no_prefix_caching,
        enable_chunked_prefill=not args.no_chunked_prefill,
        block_manager=args.block_manager or "hashed",
        mutant=args.mutant,
        extra=scheduler_option_extra(args) or None,
    )


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability in [0, 1]")
    return value


def _kv_groups(text: str) -> str:
    try:
        parse_kv_groups(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def cost_model(args: argparse.Namespace):
    deployment = DEPLOYMENTS[args.deployment]
    base = PROFILES[args.cost_profile] if args.cost_profile else deployment.cost_model()
    try:
        return base.with_overrides(args.cost)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    show_progress = not args.json and sys.stderr.isatty()
    if args.bundle:
        return _rerun(args, show_progress)
    if args.trace is None:
        args.trace = str(resources.files("schedcheck.traces") / "corpus" / DEFAULT_TRACE)
    options = SimOptions(
        seed=args.seed,
        steps_max=args.steps_max,
        keep_going=args.keep_going,
        check_invariants=not args.no_invariants,
        record_schedule=bool(args.out),
        executor=args.executor,
        executor_options=_executor_options(args),
        progress=show_progress,
        draft_acceptance=args.draft_acceptance,
    )
    try:
        config = engine_config(args)
        caps = supported(args.engine, config)
        requests = refusing(args.engine, caps, open_trace(args))
        result = run(requests, args.engine, config, options, cost_model(args))
    except (EngineLoadError, ValueError) as exc:
        if type(exc).__name__ == "TraceError":
            raise
        print(f"schedcheck: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    bundle = _bundle_path(args, result)
    if bundle is not None:
        save_bundle(bundle, result)
    _report(args, result, bundle, extra={})
    return result.exit_code


def supported(engine: str, config: EngineConfig) -> Capabilities:
    """The engine's capabilities; a UsageError naming each option it does not support."""
    caps = capabilities(engine)
    refusals = config_refusals(caps, config)
    if refusals:
        raise UsageError(f"engine {engine} does not support {'; '.join(refusals)}")
    return caps


def refusing(
    engine: str, caps: Capabilities, requests: Iterable[TraceRequest]
) -> Iterator[TraceRequest]:
    """`requests`, with an EngineRefusal at the first one the engine cannot run (lazily,
    inside the run: a trace is streamed)."""
    for r in requests:
        why = request_refusal(
            caps,
            r.request_id,
            r.cache_salt,
            r.parent_request_id is not None,
            r.abort_time_s is not None,
        )
        if why is not None:
            raise EngineRefusal(f"engine {engine} cannot replay this trace: {why}")
        yield r


def _rerun(args: argparse.Namespace, show_progress: bool) -> int:
    try:
        result, bundle = rerun_bundle(args.bundle, progress=show_progress)
    except (ValueError, KeyError, TypeError) as exc:
        if type(exc).__name__ == "TraceError":
            raise
        print(f"schedcheck: error: {args.bundle}: not a usable bundle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    want = bundle.summary.get("fingerprint")
    extra = {
        "bundle": str(bundle.path),
        "bundle_fingerprint": want,
        "reproduced": result.fingerprint == want and same_violations(result, bundle.violations),
    }
    _report(args, result, None, extra)
    return result.exit_code


def _executor_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.executor != "tensor":
        return {}
    return {"backend": args.backend, "device": args.device, "dtype": args.dtype, "seed": args.seed}


def _bundle_path(args: argparse.Namespace, result: RunResult) -> Path | None:
    if args.out:
        return Path(args.out)
    if not result.violations:
        return None
    name = f"{result.engine.replace(':', '_').replace('/', '_')}-{result.config.mutant or 'clean'}"
    return DEFAULT_BUNDLES / f"{name}-{result.fingerprint[:12]}"


def _report(
    args: argparse.Namespace, result: RunResult, bundle: Path | None, extra: dict[str, Any]
) -> None:
    summary = result.summary()
    summary["bundle"] = str(bundle.resolve()) if bundle else extra.get("bundle")
    summary.update(extra)
    if args.json:
        emit_json(summary, indent=1)
        return
    speed = result.sim_time_s / result.wall_time_s if result.wall_time_s > 0 else float("inf")
    print(
        f"engine {result.engine} ({result.config.block_manager}"
        f"{', mutant ' + result.config.mutant if result.config.mutant else ''}): "
        f"{result.requests} requests, {result.finished} finished, {result.aborted} aborted, "
        f"{result.rejected} rejected"
    )
    print(
        f"{result.steps} steps, {result.sim_time_s:.1f} s simulated in "
        f"{result.wall_time_s:.2f} s ({speed:.0f}x real time), "
        f"{result.invariants_checked} checks"
    )
    print(f"fingerprint {result.fingerprint}")
    for v in result.violations[:10]:
        print(f"VIOLATION {v.headline()}")
        if v.expected or v.found:
            print(f"  expected: {v.expected}\n  found:    {v.found}")
        for line in v.context:
            print(f"  | {line}")
    if len(result.violations) > 10:
        print(f"... and {len(result.violations) - 10} more violations")
    for rid, why in list(result.stuck.items())[:10]:
        print(f"STUCK {rid}: {why}")
    if "reproduced" in extra:
        verdict = "reproduced" if extra["reproduced"] else "NOT reproduced"
        print(
            f"bundle {extra['bundle']}: {verdict} (recorded fingerprint "
            f"{extra['bundle_fingerprint']})"
        )
    if bundle is not None:
        print(
            f"bundle written to {bundle.resolve()}\nreproduce: schedcheck replay --bundle "
            f"{bundle.resolve()}"
        )
