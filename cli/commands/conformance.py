"""`schedcheck conformance`: the kit's small scenarios against one engine, one line each.

Exit codes: 0 every check passed (or was skipped: the engine does not declare what it
needs), 1 a check failed, 2 bad input.
"""

from __future__ import annotations

import argparse

from schedcheck.cli.commands.common import UsageError, add_json_flag, run_guarded
from schedcheck.cli.output import emit_json
from schedcheck.engines.registry import EngineLoadError
from schedcheck.sim.conformance.checks import CHECKS
from schedcheck.sim.conformance.kit import FAIL, CheckResult, run_kit

EXIT_PASSED, EXIT_FAILED = 0, 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "conformance",
        help="check an engine adapter against the protocol with small fixed scenarios",
        description=(
            "Drive an engine through the conformance kit: "
            + ", ".join(c.name for c in CHECKS)
            + ". Each runs a few requests on a small cache with every invariant on, and "
            "then checks what its scenario is about. Prints PASS, SKIP (the engine does "
            "not declare what the check needs) or one FAIL line per broken expectation."
        ),
        epilog="Exit codes: 0 all checks pass, 1 a check failed, 2 bad input.",
    )
    parser.add_argument(
        "--engine",
        default="reference",
        help="reference | vllm-v1 | vllm-v0 | package.module:factory (default reference)",
    )
    parser.add_argument(
        "--block-manager",
        default=None,
        help="one the engine declares (default: its first; reference: hashed | radix)",
    )
    parser.add_argument("--out", metavar="DIR", help="write a bundle of each failed check here")
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def _run(args: argparse.Namespace) -> int:
    try:
        results = run_kit(args.engine, args.block_manager, args.out)
    except (EngineLoadError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    failed = [r for r in results if r.status == FAIL]
    if args.json:
        report = {
            "engine": args.engine,
            "block_manager": args.block_manager,
            "passed": not failed,
            "checks": [r.to_json() for r in results],
        }
        emit_json(report, indent=1)
    else:
        _print(f"{args.engine} ({args.block_manager or 'its default block manager'})", results)
    return EXIT_FAILED if failed else EXIT_PASSED


def _print(target: str, results: list[CheckResult]) -> None:
    for r in results:
        label = r.status.upper()
        notes = f" ({'; '.join(r.notes)})" if r.notes and r.status != FAIL else ""
        if not r.lines:
            print(f"{label} {r.name}{notes}")
        for line in r.lines:
            print(f"{label} {r.name}: {line}")
        if r.bundle:
            print(f"     bundle: schedcheck replay --bundle {r.bundle}")
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
    print(
        f"conformance {target}: {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['skip']} skipped of {len(results)} checks"
    )
