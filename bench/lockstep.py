"""Two versions of schedcheck in lockstep: each in a process of its own, one running at a
time (bench/fuzz_lockstep.py, bench/replay_versions.py).

The base is put first on its process's PYTHONPATH: a git worktree of a commit (or any
directory holding a `schedcheck`), its subpackages linked as its pyproject.toml maps them.
The head is the schedcheck installed. The parent asks one side at a time for a turn (a
line on the child's stdin); the child answers with one line of JSON after `MARK` on its
stdout (anything else it prints is passed on to stderr). Turns alternate which side goes
first, so a drift of the machine falls on both sides alike.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MARK = "LOCKSTEP "  # a child's replies on stdout start with it
SIDES = ("base", "head")  # side 0, side 1


def package_dirs(tree: Path) -> dict[str, str]:
    """`tree`'s subpackages as its pyproject.toml maps them: {"sim": "sim", ...}."""
    mapping = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {}
    for name, folder in mapping["package-dir"].items():  # bounded: the subpackages
        prefix, _, sub = name.partition(".")
        assert prefix == "schedcheck" and sub and "." not in sub, name
        dirs[sub] = folder
    return dirs


def link_package(tree: Path, into: Path) -> Path:
    """A `schedcheck` package under `into` made of `tree`'s subpackages, as its
    pyproject.toml maps them (`schedcheck.sim` = "sim", ...); returns `into`."""
    return _link({sub: tree / folder for sub, folder in package_dirs(tree).items()}, into)


def link_installed(into: Path) -> Path:
    """The schedcheck this process imports, linked under `into` as a base: both sides
    then run the same code from two paths (its compiled kernels are cached already)."""
    subs = package_dirs(REPO)
    return _link({sub: _imported_dir(f"schedcheck.{sub}") for sub in subs}, into)


def _imported_dir(name: str) -> Path:
    module = importlib.import_module(name)
    assert module.__file__ is not None, name
    return Path(module.__file__).parent


def _link(dirs: dict[str, Path], into: Path) -> Path:
    package = into / "schedcheck"
    package.mkdir(parents=True)
    for sub, folder in sorted(dirs.items()):  # bounded: the subpackages
        (package / sub).symlink_to(folder, target_is_directory=True)
    return into


@contextlib.contextmanager
def commit_on_path(commit: str) -> Iterator[Path]:
    """A directory to put first on PYTHONPATH for schedcheck as of `commit` (a git
    worktree of this repository, removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="lockstep-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(REPO)]
        subprocess.run([*git, "worktree", "add", "-q", "--detach", str(tree), commit], check=True)
        try:
            yield link_package(tree, Path(tmp) / "path")
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)


@contextlib.contextmanager
def base_on_path(commit: str | None, path: Path | None) -> Iterator[Path]:
    """The base's directory: `path` as given, or a worktree of `commit`."""
    if path is not None:
        yield path
        return
    assert commit is not None, "a base: a commit or a path"
    with commit_on_path(commit) as linked:
        yield linked


class Child:
    """A side's process (`command`, with `path` first on its PYTHONPATH: None, the
    schedcheck installed); its first reply is `ready`."""

    def __init__(self, name: str, command: Sequence[str], path: Path | None) -> None:
        env = dict(os.environ)
        if path is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
        self.name = name
        self._proc = subprocess.Popen(list(command), env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.ready = self._reply()

    def ask(self, line: str) -> dict[str, Any]:
        """One turn: `line` to the child, its reply back."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)

    def _reply(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:  # bounded: the child's output until its reply
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
            sys.stderr.write(line)
        raise RuntimeError(f"the {self.name} side exited ({self._proc.wait()}) without a reply")


def reply(obj: dict[str, Any]) -> None:
    """A child's answer to its parent."""
    print(MARK + json.dumps(obj), flush=True)


def where_imported() -> dict[str, str]:
    """Where this process's schedcheck came from: as imported (the base: its linked
    package) and the tree behind the links."""
    import schedcheck.fuzz

    init = Path(schedcheck.fuzz.__file__)
    return {"imported_from": str(init.parents[1]), "schedcheck": str(init.resolve().parents[1])}


def turn_order(turn: int) -> tuple[int, int]:
    """Which side goes first in a turn: side 0 in even turns, side 1 in odd ones."""
    return (0, 1) if turn % 2 == 0 else (1, 0)


def spread(ratios: Sequence[float]) -> tuple[float, list[float]]:
    """(median, [first quartile, third quartile]) of the turns' own ratios."""
    if not ratios:
        return float("nan"), [float("nan")] * 2
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else list(ratios) * 3
    return statistics.median(ratios), [quartiles[0], quartiles[-1]]


REPEAT_HELP = (
    "pairs of processes, one after the other; the median ratio (a process's memory layout "
    "moves its speed by a few percent for its lifetime)"
)


def measured(
    args: argparse.Namespace,
    measure: Callable[[argparse.Namespace, Path], dict[str, Any]],
    key: str,
) -> dict[str, Any]:
    """`measure(args, the base's path)` --repeat times, each a new pair of processes, and
    the median of their `key` (`median_of`)."""
    with base_on_path(args.base_commit, args.base_path) as path:
        return median_of([measure(args, path) for _ in range(args.repeat)], key)


def repeats_line(out: dict[str, Any], key: str) -> str | None:
    """Every pair's `key` beside the median (None for one pair)."""
    each = out[key + "s"]
    if len(each) < 2:
        return None
    return f"the median of {len(each)} pairs of processes: " + ", ".join(f"{r:.3f}x" for r in each)


def median_of(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The last run's figures, with every run's `key` as `key + "s"` and their median as
    `key` (runs: one a pair of processes, `--repeat`)."""
    out = dict(runs[-1])
    out[key + "s"] = [run[key] for run in runs]
    out[key] = statistics.median(out[key + "s"])
    return out


def add_base_arguments(parser: argparse.ArgumentParser) -> None:
    """--base-commit / --base-path, one of them (`check_base`), and --repeat."""
    base = parser.add_mutually_exclusive_group()
    base.add_argument("--base-commit", help="the base: this commit of this repository")
    base.add_argument("--base-path", type=Path, help="the base: a directory with a schedcheck")
    parser.add_argument("--repeat", type=int, default=1, help=REPEAT_HELP)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def check_base(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 unless a parent was given its base, and --repeat is at least 1."""
    if not args.child and (args.base_commit is None) == (args.base_path is None):
        parser.error("give the base: --base-commit REV or --base-path DIR")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.base_path is not None and not has_package(args.base_path):
        parser.error(
            f"--base-path {args.base_path}: no schedcheck/fuzz/__init__.py under it (a link "
            "whose worktree is gone?): the base would import the installed schedcheck"
        )


def has_package(path: Path) -> bool:
    """Does `path` hold a schedcheck package whose files exist (links followed)?"""
    return (path / "schedcheck" / "fuzz" / "__init__.py").is_file()
