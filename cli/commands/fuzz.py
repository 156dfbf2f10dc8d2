"""`schedcheck fuzz`: a campaign of generated traces and swarm configs against one engine.

Stops at the first finding or when the budget is spent; prints the seed, the options and a
reproduce command for each finding (--json: one object). With --continue-past-findings,
campaign follows campaign until the budget is spent, each ignoring the invariants found
before it, so one run lists every distinct kind of finding (--json: {"campaigns": [...]}).
`--shrink BUNDLE` shrinks a failing bundle (from `schedcheck replay`) by delta debugging.

Exit codes: 0 nothing found, 1 found (bundle written), 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from schedcheck.cli.commands.campaign_progress import BarProgress, JsonLinesProgress
from schedcheck.cli.commands.common import (
    UsageError,
    add_json_flag,
    non_negative_int,
    positive_float,
    positive_int,
    run_guarded,
)
from schedcheck.cli.output import emit_json
from schedcheck.engines.registry import EngineLoadError
from schedcheck.fuzz.campaign import CampaignOptions, CampaignResult, run_campaign
from schedcheck.fuzz.database import DEFAULT_DB_DIR
from schedcheck.fuzz.ray_cluster import RayMissing, import_ray
from schedcheck.fuzz.regression import write_regression
from schedcheck.fuzz.shrink import shrink_bundle
from schedcheck.fuzz.swarm import FAMILIES, SwarmSpec

EXIT_NOTHING, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2
# an invariant (a kind of finding), or a finding's signature: `kind[case]` (Violation.signature)
IGNORABLE = re.compile(
    r"((accounting|shadow-kv|block-pool|outputs|protocol)\.[a-z-]+|engine-crash|harness-crash)"
    r"(\[[^\]\n]+\])?|liveness"
)
DEFAULT_OUT = DEFAULT_DB_DIR / "findings"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "fuzz",
        help="fuzz an engine with generated traces and swarm configs until a finding",
        description=(
            "Fuzz scheduler interleavings: Hypothesis draws small traces that stress index "
            "arithmetic (block-boundary lengths, same-prefix bursts, fully cached prompts, "
            "aborts mid-chunk, later turns) and an engine config per example, with fault "
            "points; every step is checked. A finding is shrunk to a minimal trace and "
            "config and written as a bundle. The failure database (.schedcheck/fuzz/) is "
            "replayed first: a recorded finding that still fails is reported as it fails "
            "today (new raw and shrunk bundles under --out; the recorded one is named in "
            "replayed_from and left as it was)."
        ),
        epilog="Exit codes: 0 nothing found, 1 found, 2 bad input.",
    )
    add_target_args(parser)
    add_campaign_args(parser)
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=str(DEFAULT_OUT),
        help=f"bundles of findings go here (default {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--regressions",
        metavar="DIR",
        default=None,
        help="also write a pytest regression test here (e.g. tests/regressions)",
    )
    parser.add_argument(
        "--continue-past-findings",
        action="store_true",
        help="after a finding, go on with its signature ignored (a new campaign in the "
        "budget left, bundles under OUT/campaign-N), until the budget is spent: every "
        "distinct bug (signature: the crash's exception and frame, what a bad read found "
        "and how, else the invariant) is reported once, shrunk on its own; for campaigns "
        "against real engines",
    )
    parser.add_argument(
        "--shrink",
        metavar="BUNDLE",
        default=None,
        help="shrink this failing bundle by delta debugging instead of fuzzing",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def add_target_args(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("what to fuzz")
    target.add_argument(
        "--engine",
        default="reference",
        help="reference | vllm-v1 | vllm-engine | sglang | vllm-v0 | package.module:factory",
    )
    target.add_argument("--mutant", default=None, help="switch on a named mutant (mutants list)")
    target.add_argument(
        "--block-manager",
        default=None,
        help="fix the block manager (reference: hashed | radix; vllm-v0: v1 | v2; default "
        "drawn for reference, else the engine's default)",
    )
    target.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="INVARIANT|SIGNATURE",
        help="an invariant of a known behaviour (e.g. outputs.length), or one finding's "
        "signature (e.g. 'engine-crash[AssertionError at vllm/v1/core/block_pool.py:"
        "cache_full_blocks:223]', as a campaign prints it): its violations are counted, not "
        "findings, so the campaign looks past it; engine-crash, liveness: examples that crash the "
        "engine, or stall, count as clean (the run still ends there); repeatable",
    )
    target.add_argument(
        "--family",
        action="append",
        default=[],
        choices=FAMILIES,
        help="draw this option family on in every example (a campaign per family); vllm-v1: "
        "priority (policy), async (async scheduling), budget (max_num_scheduled_tokens, adaptive "
        "threshold, prefill_schedule_interval), admission (watermark, scheduler_reserve_full_isl, "
        "max_num_active_seqs), queue (max_num_queued_*), streaming (streaming-input sessions; a "
        "turn's input queued while its parent runs in half; 0.34.0 on), spec-decode (drafts), "
        "sliding-window (a hybrid KV cache), eos (the model's EOS stops requests), max-model-len "
        "(near a request's length); vllm-engine: priority, budget, admission, queue; reference "
        "and sglang: async, spec-decode (reference), eos, max-model-len; repeatable",
    )


def add_campaign_args(parser: argparse.ArgumentParser, budget_s: float = 60.0) -> None:
    camp = parser.add_argument_group("campaign")
    camp.add_argument(
        "--budget-s",
        type=positive_float,
        default=budget_s,
        metavar="S",
        help=f"wall-clock budget in seconds (default {budget_s:g})",
    )
    camp.add_argument("--seed", type=non_negative_int, default=0, metavar="N")
    camp.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="worker processes, each its own seed stream (default 1)",
    )
    camp.add_argument(
        "--max-examples",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop each worker after about N examples (default: the budget)",
    )
    camp.add_argument("--examples-per-round", type=positive_int, default=32, metavar="N")
    camp.add_argument(
        "--shrink-runs-max",
        type=positive_int,
        default=200,
        metavar="N",
        help="Hypothesis shrink runs per finding (default 200; a deterministic bound)",
    )
    camp.add_argument(
        "--shrink-budget-s",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="wall-clock safety net on shrinking (default 60)",
    )
    camp.add_argument(
        "--db",
        metavar="DIR",
        default=str(DEFAULT_DB_DIR),
        help=f"failure database (default {DEFAULT_DB_DIR})",
    )
    camp.add_argument(
        "--no-db", action="store_true", help="neither replay nor record findings (a fresh campaign)"
    )
    camp.add_argument("--no-faults", action="store_true", help="no fault points")
    camp.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run every round as a Ray task (pip install 'schedcheck[ray]'): no ADDRESS "
        "starts a local Ray, 'auto' or HOST:PORT joins a running cluster; --workers is "
        "then the number of rounds in flight, and the seed gives the same finding as one "
        "local process",
    )
    camp.add_argument(
        "--json-progress",
        action="store_true",
        help="progress as JSON lines on stderr (examples, examples per second, findings, "
        "rounds in flight) instead of a bar",
    )


def campaign_options(args: argparse.Namespace, spec: SwarmSpec, out_dir: str) -> CampaignOptions:
    return CampaignOptions(
        spec=spec,
        seed=args.seed,
        workers=args.workers,
        budget_s=args.budget_s,
        out_dir=out_dir,
        db_dir=None if args.no_db else args.db,
        examples_per_round=args.examples_per_round,
        examples_max=args.max_examples,
        shrink_runs_max=args.shrink_runs_max,
        shrink_budget_s=args.shrink_budget_s,
        on_ray=args.ray is not None,
        ray_address=args.ray or None,
    )


def _run(args: argparse.Namespace) -> int:
    if args.shrink:
        return _shrink(args)
    if args.ray is not None:
        try:
            import_ray(args.ray or None)
        except RayMissing as exc:
            raise UsageError(str(exc)) from None
    for name in args.ignore:
        if not IGNORABLE.fullmatch(name):
            raise UsageError(
                f"--ignore {name!r}: not an invariant name (engine-crash, harness-crash, liveness, "
                "or family.name with the family one of accounting, shadow-kv, block-pool, "
                "outputs, protocol; see README 'What is checked') nor a finding's signature "
                "(NAME[case])"
            )
    spec = SwarmSpec(
        engine=args.engine,
        mutant=args.mutant,
        block_manager=args.block_manager,
        faults=not args.no_faults,
        ignore=tuple(args.ignore),
        families=tuple(args.family),
    )
    if args.continue_past_findings:
        return _continue_past_findings(args, spec)
    report = _campaign(args, campaign_options(args, spec, args.out))
    _print(args, report)
    return EXIT_FOUND if report["found"] else EXIT_NOTHING


def _campaign(args: argparse.Namespace, options: CampaignOptions) -> dict[str, Any]:
    """One campaign, its report, and its regression test if asked for."""
    progress = _progress(args)
    try:
        result = run_campaign(options, progress)
    except (EngineLoadError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        if progress is not None:
            progress.close()
    report = campaign_report(result, reproduce_command(args, options.spec.ignore))
    report["report"] = write_finding_report(report.get("bundle") if result.finding else None)
    write_campaign_json(Path(options.out_dir), report)
    if result.finding is not None and result.finding.get("bundle") and args.regressions:
        test = write_regression(
            result.finding["bundle"], args.regressions, result.finding["headline"]
        )
        report["regression"] = str(test)
    return report


def _continue_past_findings(args: argparse.Namespace, spec: SwarmSpec) -> int:
    """Campaigns in the budget, each ignoring the kinds of finding before it (bounded: a kind
    is ignored once, and there are finitely many invariants)."""
    deadline_s = time.monotonic() + args.budget_s
    reports: list[dict[str, Any]] = []
    while (budget_s := deadline_s - time.monotonic()) > 0:
        out_dir = str(Path(args.out) / f"campaign-{len(reports)}")
        options = dataclasses.replace(campaign_options(args, spec, out_dir), budget_s=budget_s)
        report = _campaign(args, options)
        reports.append(report)
        if not args.json:
            _print(args, report)
        signature = report["signature"] or ""
        if not report["found"] or report["interrupted"] or not IGNORABLE.fullmatch(signature):
            break
        assert signature not in spec.ignore, f"an ignored finding {signature} was reported"
        spec = dataclasses.replace(spec, ignore=(*spec.ignore, signature))
    findings = [_distinct(r) for r in reports if r["found"]]
    if args.json:
        summary = {
            "found": bool(findings),
            "kinds": [f["kind"] for f in findings],
            "findings": findings,
            "campaigns": reports,
        }
        emit_json(summary, indent=1, sort_keys=True)
    else:
        print(f"{len(reports)} campaign(s); {len(findings)} distinct finding(s)")
        for f in findings:
            print(f"  {f['signature']}: {f['time_to_detect_s']} s, {f['shrunk_requests']} "
                  f"request(s), {f['bundle']}")  # fmt: skip
    return EXIT_FOUND if findings else EXIT_NOTHING


def _distinct(report: dict[str, Any]) -> dict[str, Any]:
    """One distinct finding of a --continue-past-findings run, as its summary lists it."""
    keys = ("signature", "kind", "headline", "time_to_detect_s", "shrunk_requests", "bundle")
    return {k: report.get(k) for k in keys}


def write_campaign_json(out_dir: Path, report: dict[str, Any]) -> None:
    """The campaign's report in its directory, for `schedcheck report CAMPAIGN_DIR`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=1, sort_keys=True) + "\n"
    (out_dir / "campaign.json").write_text(text, encoding="utf-8")


def write_finding_report(bundle: str | None) -> str | None:
    """The shrunk finding's page beside its bundle (BUNDLE/report.html); None without a
    bundle or without plotly (the `report` extra)."""
    if not bundle:
        return None
    from schedcheck.report.command import write_report  # on top of sim: imported only here

    try:
        return str(write_report(Path(bundle), Path(bundle) / "report.html"))
    except ModuleNotFoundError as exc:
        if not str(exc.name).startswith("plotly"):
            raise
        return None


def reproduce_command(args: argparse.Namespace, ignore: tuple[str, ...]) -> str:
    """The campaign's command line (`ignore`: the invariants that campaign ignored)."""
    words = ["schedcheck", "fuzz", "--engine", args.engine]
    for flag, value in (("--mutant", args.mutant), ("--block-manager", args.block_manager)):
        if value:
            words += [flag, value]
    words += [
        "--seed",
        str(args.seed),
        "--workers",
        str(args.workers),
        "--budget-s",
        f"{args.budget_s:g}",
        "--no-db",
    ]
    if args.no_faults:
        words.append("--no-faults")
    for family in args.family:
        words += ["--family", family]
    for name in ignore:
        words += ["--ignore", name]
    return shlex.join(words)


def campaign_report(result: CampaignResult, command: str) -> dict[str, Any]:
    """The JSON object of a campaign (also what the text output is printed from)."""
    finding = result.finding or {}
    raw = result.raw[0] if result.raw else {}
    found = bool(finding) or bool(raw)
    opts = result.options
    return {
        "found": found,
        "time_to_detect_s": finding.get("time_to_detect_s") if finding else None,
        "examples": result.examples,
        "repeats": result.repeats,
        "bundle": finding.get("bundle") or raw.get("bundle"),
        "shrunk_requests": finding.get("shrunk_requests"),
        "kind": finding.get("kind") or raw.get("kind"),
        "signature": finding.get("signature") or raw.get("signature"),
        "headline": finding.get("headline") or raw.get("headline"),
        "seed": opts.seed,
        "workers": opts.workers,
        "budget_s": opts.budget_s,
        "elapsed_s": round(result.elapsed_s, 3),
        "engine": opts.spec.engine,
        "mutant": opts.spec.mutant,
        "block_manager": opts.spec.block_manager,
        "ignore": list(opts.spec.ignore),
        "coverage": dict(result.coverage),
        "never_reached": result.never_reached(),
        "unmeasured": result.unmeasured(),
        "finding": finding or None,
        "raw_bundles": [r.get("bundle") for r in result.raw],
        "other_findings": [
            {k: f.get(k) for k in ("worker", "round", "round_seed", "kind", "signature", "bundle")}
            for f in result.findings
            if f is not result.finding
        ],
        "clean_failures": result.clean_failures,
        "replayed": result.replayed,
        "replayed_from": finding.get("replayed_from"),
        "interrupted": result.interrupted,
        "errors": result.errors,
        "reproduce": (
            f"schedcheck replay --bundle {finding['bundle']}" if finding.get("bundle") else None
        ),
        "reproduce_campaign": command,
        "progress": [list(p) for p in result.progress],
        "configs": result.configs,
    }


def _origin(finding: dict[str, Any]) -> str:
    """Where a finding came from: a worker's round, or the failure database (as recorded)."""
    if not finding.get("replayed"):
        return (
            f"(worker {finding['worker']}, round {finding['round']}, "
            f"round seed {finding['round_seed']})"
        )
    recorded = finding["replayed_from"]
    if not finding["changed"]:
        return f"(replayed from the failure database: {recorded['bundle']})"
    return (
        "(replayed from the failure database; it fails differently now: recorded as "
        f"{recorded['kind']}: {recorded['headline']} in {recorded['bundle']})"
    )


def _print(args: argparse.Namespace, report: dict[str, Any]) -> None:
    if args.json:
        emit_json(report, indent=1, sort_keys=True)
        return
    print(
        f"fuzz {report['engine']} (mutant {report['mutant'] or 'none'}): "
        f"{report['examples']} examples ({report['repeats']} repeats, judged from memory) "
        f"in {report['elapsed_s']:.1f} s, seed {report['seed']}, {report['workers']} worker(s)"
        f"{', interrupted' if report['interrupted'] else ''}"
    )
    finding = report["finding"]
    if finding:
        print(
            f"FOUND {finding['kind']} after {finding['time_to_detect_s']:.2f} s {_origin(finding)}"
        )
        print(f"  {finding['headline']}")
        if finding.get("signature") and finding["signature"] != finding["kind"]:
            print(f"  signature: {finding['signature']}")
        print(
            f"  shrunk to {finding['shrunk_requests']} requests; options "
            f"{json.dumps(finding['scenario']['config'] if finding.get('scenario') else None)}"
        )
        print(f"  faults {finding['scenario']['faults'] if finding.get('scenario') else []}")
        print(f"  reproduce: {report['reproduce']}\n  campaign:  {report['reproduce_campaign']}")
        if report.get("report"):
            print(f"  report:    {report['report']}")
        for other in report["other_findings"]:
            print(
                f"also found by worker {other['worker']} in round {other['round']} (round "
                f"seed {other['round_seed']}): {other['kind']}; reproduce: schedcheck replay "
                f"--bundle {other['bundle']}"
            )
    elif report["found"]:
        print(f"FOUND (not shrunk) {report['kind']}: {report['headline']}")
        print(f"  bundle: {report['bundle']}")
    else:
        print("nothing found")
    for failure in report["clean_failures"][:3]:
        print(
            f"CLEAN ENGINE FAILS too (not the mutant's): {failure['headline']}\n"
            f"  bundle: {failure['bundle']}"
        )
    if report.get("regression"):
        print(f"regression test: {report['regression']}")
    cov = report["coverage"]
    print("coverage: " + ", ".join(f"{k} {v}" for k, v in cov.items()))
    if report["never_reached"]:
        print("never reached: " + ", ".join(report["never_reached"]))
    if report["unmeasured"]:
        print("unmeasured (the engine's snapshot does not count them): "
              + ", ".join(report["unmeasured"]))  # fmt: skip
    for error in report["errors"]:
        print(f"worker error: {error}", file=sys.stderr)


def _shrink(args: argparse.Namespace) -> int:
    out = Path(args.out) / (Path(args.shrink).resolve().name + "-shrunk")
    try:
        bundle, before, after = shrink_bundle(args.shrink, out)
    except (KeyError, TypeError, ValueError) as exc:
        if type(exc).__name__ == "TraceError":
            raise
        raise UsageError(f"{args.shrink}: {exc}") from None
    report = {
        "found": True,
        "bundle": str(bundle),
        "requests": before,
        "shrunk_requests": after,
        "reproduce": f"schedcheck replay --bundle {bundle}",
    }
    if args.regressions:
        report["regression"] = str(write_regression(bundle, args.regressions))
    if args.json:
        emit_json(report, indent=1, sort_keys=True)
    else:
        print(f"shrunk {before} -> {after} requests: {bundle}\nreproduce: {report['reproduce']}")
    return EXIT_FOUND


def _progress(args: argparse.Namespace) -> BarProgress | JsonLinesProgress | None:
    if args.json_progress:
        return JsonLinesProgress()
    return None if args.json or not sys.stderr.isatty() else BarProgress()
