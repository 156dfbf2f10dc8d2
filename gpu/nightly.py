"""The nightly GPU consistency job: a corpus of bundles on every available backend.

    python -m schedcheck.gpu.nightly [DIR ...] --out OUT [--device cuda] [--dtype bf16]
        [--backends all|NAME,...] [--no-scenarios] [--regressions DIR | --no-regressions]
        [--block-size 16] [--max-bundles N] [--budget-s S]

Run it from the repository root. Corpus: every bundle (a directory with schedule.jsonl or
schedule.jsonl.xz) under --regressions (default tests/regressions/) and under each DIR,
plus the hand-built scenarios of gpu/scenarios.py (written to OUT/scenarios/). Windows of
the real traces enter as bundles recorded beforehand (gpu/ never imports the simulator),
e.g. traces/corpus/windows/ (which gpu/device_check.sh and tox -e gpu pass), or
`schedcheck replay TRACE --max-requests 20 --out DIR/window-0`.
Each bundle runs on each backend that takes the configuration (others are `refused`,
JUnit skipped). Expectations:

    scenario          its pinned first divergences (clean: none); any other result fails
    bundle, no recorded violations    must verify consistent (near ties allowed)
    bundle with recorded violations   informational: verdict and position agreement

Bundles run in corpus order, each on every backend; past --budget-s the rest are `skipped`
(JUnit skipped, not failures), so a short GPU lease still ends with its reports.
Writes OUT/nightly.xml (JUnit), OUT/nightly.json, OUT/nightly.md; prints the per-backend
table last. Exit 1 on any failure (an unexpected misalignment, or a pinned misalignment not
found), 2 on bad usage, else 0.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch

from schedcheck.gpu import scenarios
from schedcheck.gpu.backends import PREFERENCE, get_backend
from schedcheck.gpu.backends.base import AttentionBackend, BackendSpec
from schedcheck.gpu.compare import VerifyOptions, build_model, cpu_threads, verify_bundle
from schedcheck.gpu.reports import Result, table, write_json, write_junit, write_markdown
from schedcheck.traces.bundle import SCHEDULE_FILES, read_bundle

REGRESSIONS_DEFAULT = Path("tests") / "regressions"  # relative to the working directory
MAX_BUNDLES_DEFAULT = 200


def find_bundles(roots: Sequence[Path], limit: int) -> list[Path]:
    """Bundle directories under `roots`, sorted, at most `limit`."""
    found: set[Path] = set()
    for root in roots:
        if root.is_dir():
            for name in SCHEDULE_FILES:
                found.update(p.parent for p in root.rglob(name))
    return sorted(found)[:limit]


def write_scenarios(out: Path, block_size: int) -> dict[Path, scenarios.Expected]:
    pinned = {}
    for scenario in scenarios.clean(block_size) + scenarios.misaligned(block_size):
        path = scenarios.write_scenario_bundle(scenario, out / scenario.name)
        pinned[path] = scenario.expected
    return pinned


def judge(path: Path, backend: str, report, pinned: scenarios.Expected | None) -> Result:
    first = {r: (f.kind, f.step, f.position) for r, f in report.first_divergence().items()}
    verdict = report.verdict
    recorded = bool(read_bundle(path).violations)
    if pinned is not None:
        expected = "misaligned" if pinned else "consistent"
        failed = first != pinned if pinned else verdict == "misaligned"
        message = f"first divergences {first}, pinned {pinned}"
    elif recorded:
        expected, failed = "recorded", False
        agree = sum(m["same_position"] for m in report.to_json()["violations_matched"])
        message = f"{agree} recorded violation(s) at the same position; first {first}"
    else:
        expected, failed = "consistent", verdict == "misaligned"
        message = f"first divergences {first}" if first else "no divergence"
    t = report.timing_s
    return Result(
        str(path),
        backend,
        verdict,
        expected,
        failed,
        message,
        t["replay"],
        t["forward"],
        t["baseline"],
        report.tokens,
        report.to_json(),
    )


def run_one(
    path: Path,
    backend: AttentionBackend,
    opts: VerifyOptions,
    model,
    pinned: scenarios.Expected | None,
) -> Result:
    bundle_cfg = read_bundle(path).config.get("engine_config", {})
    cfg = model.cfg
    spec = BackendSpec.for_device(
        model.device,
        dtype=model.dtype,
        block_size=int(bundle_cfg.get("block_size", 16)),
        head_dim=cfg.head_dim,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
    )
    refusal = backend.refusal(spec)
    if refusal is not None:
        return Result(str(path), backend.name, "refused", "-", False, refusal)
    try:
        report = verify_bundle(path, opts, model=model, backend=backend)
    except Exception as exc:  # a kernel error must not stop the other bundles
        return Result(
            str(path),
            backend.name,
            "error",
            "-",
            True,
            f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}",
        )
    return judge(path, backend.name, report, pinned)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m schedcheck.gpu.nightly", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("dirs", nargs="*", type=Path, help="more directories holding bundles")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--backends", default="all", help="all, or names separated by commas")
    p.add_argument("--no-scenarios", action="store_true", help="skip the hand-built corpus")
    p.add_argument(
        "--regressions",
        type=Path,
        default=REGRESSIONS_DEFAULT,
        metavar="DIR",
        help="the regression bundles (default: tests/regressions, from the repository root)",
    )
    p.add_argument("--no-regressions", action="store_true", help="skip the regression bundles")
    p.add_argument("--block-size", type=int, default=16, help="block size of the scenarios")
    p.add_argument("--max-bundles", type=int, default=MAX_BUNDLES_DEFAULT)
    p.add_argument("--seed", type=int, default=0, help="model weights seed")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        metavar="S",
        help="start no replay after S seconds; the rest are reported skipped (default: none)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    names = PREFERENCE if args.backends == "all" else tuple(args.backends.split(","))
    try:
        backends = [get_backend(n) for n in names]
    except ValueError as exc:
        print(f"nightly: {exc}", file=sys.stderr)
        return 2
    if not args.no_regressions and not args.regressions.is_dir():
        print(
            f"nightly: no regression bundles at {args.regressions} (run from the repository "
            "root, or pass --regressions DIR or --no-regressions)",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    pinned = {} if args.no_scenarios else write_scenarios(args.out / "scenarios", args.block_size)
    roots = [*([] if args.no_regressions else [args.regressions]), *args.dirs]
    corpus = list(pinned) + find_bundles(roots, args.max_bundles)
    opts = VerifyOptions(device=args.device, dtype=dtype, seed=args.seed)
    cpu_threads(args.device)
    model = build_model(opts)
    started = time.perf_counter()
    results = []
    for path in corpus:  # bounded: the corpus, times the backends
        for backend in backends:
            if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
                message = f"not started: the {args.budget_s:g} s budget was spent"
                results.append(Result(str(path), backend.name, "skipped", "-", False, message))
            else:
                results.append(run_one(path, backend, opts, model, pinned.get(path)))
    meta = {
        "device": _device_name(args.device),
        "dtype": dtype,
        "torch": torch.__version__,
        "bundles": len(corpus),
        "wall_s": round(time.perf_counter() - started, 2),
    }
    write_junit(args.out / "nightly.xml", results)
    write_json(args.out / "nightly.json", results, meta)
    write_markdown(args.out / "nightly.md", results, meta)
    for r in results:
        if r.failed:
            print(
                f"FAIL {r.backend} {r.bundle}: {r.verdict} (expected {r.expected}): "
                f"{r.message.splitlines()[0]}"
            )
    print(", ".join(f"{k}: {v}" for k, v in meta.items()))
    print("\n".join(table(results)))
    return 1 if any(r.failed for r in results) else 0


def _device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return device


if __name__ == "__main__":
    sys.exit(main())
