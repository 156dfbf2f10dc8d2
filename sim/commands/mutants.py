"""`schedcheck mutants`: the reference engine's catalog of named mutants.

    schedcheck mutants list [--json]

One subcommand per function pair (`_register_<verb>` adds the parser, `run_<verb>` runs it);
a new subcommand (e.g. `score`) is one more pair and one line in `register`.

Exit codes: 0 ok, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys

from schedcheck.engines.reference.mutants import MUTANTS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mutants",
        help="the reference engine's named mutants (re-created real bugs)",
        description=(
            "The reference engine's catalog of mutants: each re-creates one real bug class "
            "of ../shared/BUGS.md in the scheduler, a block manager or the runner metadata, "
            "and is switched on by name (replay --mutant NAME)."
        ),
    )
    verbs = parser.add_subparsers(dest="mutants_command", metavar="SUBCOMMAND", required=True)
    _register_list(verbs)


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
        json.dump([m.to_json() for m in MUTANTS], sys.stdout, indent=2)
        sys.stdout.write("\n")
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
