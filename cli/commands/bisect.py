"""`schedcheck bisect BUNDLE`: replay a vLLM finding in each release's env; since when, and
is it fixed. Exit codes: 0 a verdict, 2 bad input (no bundle, no finding, a bad release)."""

from __future__ import annotations

import argparse
from pathlib import Path

from schedcheck.cli.commands.common import UsageError, add_json_flag, progress, run_guarded
from schedcheck.cli.output import emit_json
from schedcheck.fuzz.bisect import (
    Outcome,
    classify,
    env_python,
    recorded_kind,
    release_key,
    report,
    run_release,
)

# releases with a tox env in this repository (tox.ini), oldest first; any other
# `vllm-v1-RELEASE` env found under --tox-dir is tried too
RELEASES = (
    "0.5.4",
    "0.6.0",
    "0.10.1.1",
    "0.11.0",
    "0.11.1",
    "0.12.0",
    "0.25.0",
    "0.33.0",
    "0.34.0",
)
V1_ENV_PREFIX = "vllm-v1-"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bisect",
        help="replay a vLLM finding's bundle in each release: which broke it, which fixed it",
        description=(
            "Replay BUNDLE (a finding against vLLM) with every invariant in each release's "
            "own environment (the tox envs vllm-v0.5.4, vllm-v0.6.0, vllm-v1-RELEASE; "
            "vllm-v1 holds the newest v1 release), and say since when it fails and whether a "
            "release fixed it: present, introduced in R, fixed in R, changed (fails "
            "otherwise), mixed, absent or not-run. A release whose adapter or vLLM refuses "
            "the bundle's config is reported as refused and left out of the verdict."
        ),
        epilog="Exit codes: 0 a verdict, 2 bad input.",
    )
    parser.add_argument("bundle", metavar="BUNDLE", help="a bundle directory with a finding")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--releases",
        default=None,
        metavar="R,...",
        help=f"the releases to try (default: every one of {', '.join(RELEASES)} with an env)",
    )
    which.add_argument(
        "--all", action="store_true", help=f"every known release: {', '.join(RELEASES)}"
    )
    parser.add_argument(
        "--tox-dir",
        default=".tox",
        metavar="DIR",
        help="where the release envs are (default .tox; build one with tox -e ENV --notest)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="RELEASE=PYTHON",
        help="the Python of a release's env, instead of the tox env's (repeatable)",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run_guarded(_run))


def _releases(args: argparse.Namespace, pythons: dict[str, Path]) -> list[str]:
    if args.releases:
        chosen = [r.strip() for r in args.releases.split(",")]
    elif args.all:
        chosen = list(pythons)
    else:
        chosen = [r for r, python in pythons.items() if python.exists()] or list(RELEASES)
    for release in chosen:
        try:
            release_key(release)
        except ValueError as exc:
            raise UsageError(f"--releases: {exc}") from None
    return sorted(set(chosen), key=release_key)


def _found_v1_releases(tox_dir: Path) -> list[str]:
    """The releases of the `vllm-v1-RELEASE` envs under tox_dir (a name that is not a
    release number is skipped)."""
    found = []
    for env in sorted(tox_dir.glob(V1_ENV_PREFIX + "*")):
        release = env.name[len(V1_ENV_PREFIX) :]
        try:
            release_key(release)
        except ValueError:
            continue
        found.append(release)
    return found


def _pythons(args: argparse.Namespace) -> dict[str, Path]:
    tox_dir = Path(args.tox_dir)
    releases = sorted({*RELEASES, *_found_v1_releases(tox_dir)}, key=release_key)
    pythons = {r: env_python(tox_dir, r) for r in releases}
    for item in args.env:
        release, sep, python = item.partition("=")
        if not sep or not python:
            raise UsageError(f"--env {item!r}: RELEASE=PYTHON, e.g. 0.6.0=/venvs/v060/bin/python")
        pythons[release] = Path(python)
    return pythons


def _run(args: argparse.Namespace) -> int:
    bundle = Path(args.bundle).resolve()
    if not (bundle / "config.json").is_file():
        raise UsageError(f"{args.bundle}: not a bundle (no config.json)")
    try:
        kind = recorded_kind(bundle)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from None
    pythons = _pythons(args)
    releases = _releases(args, pythons)
    outcomes: list[Outcome] = []
    for release in progress(releases, enabled=not args.json, desc="bisect", unit="release"):
        python = pythons.get(release) or env_python(Path(args.tox_dir), release)
        outcomes.append(run_release(release, python, bundle))
    verdict = classify(outcomes, kind)
    if args.json:
        emit_json(report(bundle, outcomes, verdict), indent=1, sort_keys=True)
        return 0
    print(f"bundle {bundle} (recorded: {kind})")
    print(f"{'release':<10} {'outcome':<34} first violation")
    for o in outcomes:
        print(f"{o.release:<10} {o.status:<34} {o.headline[:100]}")
    print(f"verdict: {verdict.kind}: {verdict.words}")
    return 0
