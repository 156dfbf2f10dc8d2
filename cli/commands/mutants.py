"""`schedcheck mutants`: the reference engine's catalog of named mutants.

    schedcheck mutants list [--json]
    schedcheck mutants score --budget-s S [--json] [--mutant NAME ...]

One subcommand per function pair (`_register_<verb>` adds the parser, `run_<verb>` runs it);
a new subcommand (e.g. `score`) is one more pair and one line in `register`.

Exit codes: 0 ok, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys

from schedcheck.cli.output import emit_json
from schedcheck.engines.reference.mutants import MUTANTS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mutants",
        help="the reference engine's named mutants (re-created real bugs)",
        description=(
            "The reference engine's catalog of mutants: each re-creates one real bug class "
            "of docs/bug-classes.md in the scheduler, a block manager or the runner metadata, "
            "and is switched on by name (replay --mutant NAME)."
        ),
    )
    verbs = parser.add_subparsers(dest="mutants_command", metavar="SUBCOMMAND", required=True)
    _register_list(verbs)
    _register_score(verbs)


def _register_list(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "list",
        help="list every mutant: name, component, bug class, reference",
        description="List every mutant of the catalog, in catalog order.",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of {name, component, bug_class, reference, description}",
    )
    parser.set_defaults(run=run_list)


def run_list(args: argparse.Namespace) -> int:
    if args.json:
        emit_json([m.to_json() for m in MUTANTS], indent=2)
        return 0
    name_width = max(len(m.name) for m in MUTANTS)
    component_width = max(len(m.component) for m in MUTANTS)
    for mutant in MUTANTS:
        sys.stdout.write(
            f"{mutant.name:<{name_width}}  {mutant.component:<{component_width}}  "
            f"{mutant.reference}\n"
            f"{'':<{name_width}}  {'':<{component_width}}  {mutant.bug_class}\n"
        )
    return 0


def _register_score(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "score",
        help="the mutation score: one fuzz campaign per mutant (fuzz/score.py)",
        description=(
            "Run one `schedcheck fuzz` campaign per mutant (fresh failure database each) and "
            "print a table: found, time to detect, shrunk reproducer size; then the score. "
            "A mutant counts as found when its shrunk bundle fails with it and runs clean "
            "without it. Exit 0 when every mutant is found, 1 otherwise, 2 bad usage."
        ),
    )
    parser.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="NAME",
        help="score only these mutants (repeatable; default: all)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=60.0,
        metavar="S",
        help="budget of each mutant's campaign (default 60)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N")
    parser.add_argument("--workers", type=int, default=1, metavar="N")
    parser.add_argument("--out", default=".schedcheck/fuzz/score", metavar="DIR")
    parser.add_argument(
        "--regressions",
        default=None,
        metavar="DIR",
        help="write each finding's regression test here (tests/regressions)",
    )
    parser.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    parser.set_defaults(run=run_score)


def run_score(args: argparse.Namespace) -> int:
    from schedcheck.fuzz.score import ScoreOptions, format_table, score_mutants, summary

    if args.budget_s <= 0 or args.workers < 1 or args.seed < 0:
        print("schedcheck: error: --budget-s > 0, --workers >= 1, --seed >= 0", file=sys.stderr)
        return 2
    opts = ScoreOptions(
        mutants=tuple(args.mutant),
        budget_s=args.budget_s,
        seed=args.seed,
        workers=args.workers,
        out_dir=args.out,
        regressions_dir=args.regressions,
    )
    try:
        opts.names()
    except ValueError as exc:
        print(f"schedcheck: error: {exc}", file=sys.stderr)
        return 2
    show = None if args.json else (lambda row: print(format_table([row]).splitlines()[1]))
    rows = score_mutants(opts, show)
    if args.json:
        emit_json({"rows": [r.to_json() for r in rows], **summary(rows)}, indent=1)
    else:
        print(format_table(rows))
    return 0 if all(r.found for r in rows) else 1
