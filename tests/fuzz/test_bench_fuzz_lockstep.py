"""bench/fuzz_lockstep.py: two sides (here the same code twice, from two paths) fuzzing
in turns, each turn's examples and CPU time to its side; bench/lockstep.py links a
version of schedcheck from its tree as its pyproject.toml maps it."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

import schedcheck.fuzz

BENCH = Path(__file__).resolve().parents[2] / "bench"
REPO = BENCH.parent


@pytest.fixture
def benches(monkeypatch):
    """(bench/lockstep.py, bench/fuzz_lockstep.py), imported as the script imports them."""
    monkeypatch.syspath_prepend(str(BENCH))
    yield importlib.import_module("lockstep"), importlib.import_module("fuzz_lockstep")
    for name in ("fuzz_lockstep", "lockstep"):
        sys.modules.pop(name, None)


def test_a_tree_is_linked_as_its_pyproject_maps_it(benches, tmp_path):
    lockstep, _ = benches
    tree = tmp_path / "tree"
    for folder in ("sim", "fuzzing"):
        (tree / folder).mkdir(parents=True)
    (tree / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "schedcheck.sim" = "sim", '
        '"schedcheck.fuzz" = "fuzzing" }\n'
    )
    path = lockstep.link_package(tree, tmp_path / "path")
    package = path / "schedcheck"
    assert sorted(p.name for p in package.iterdir()) == ["fuzz", "sim"]
    assert (package / "fuzz").resolve() == (tree / "fuzzing").resolve()
    assert (package / "sim").resolve() == (tree / "sim").resolve()


def test_a_nested_subpackage_mapping_is_refused(benches, tmp_path):
    lockstep, _ = benches
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "schedcheck.sim.x" = "x" }\n'
    )
    with pytest.raises(AssertionError):
        lockstep.link_package(tmp_path, tmp_path / "path")


def test_turns_alternate_which_side_goes_first_and_their_ratios_spread(benches):
    lockstep, _ = benches
    assert [lockstep.turn_order(t) for t in (-1, 0, 1, 2)] == [(1, 0), (0, 1), (1, 0), (0, 1)]
    assert lockstep.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, [1.5, 4.5])
    assert lockstep.spread([2.0]) == (2.0, [2.0, 2.0])
    runs = [
        {"speedup": 1.9, "turns": 1},
        {"speedup": 1.7, "turns": 2},
        {"speedup": 1.8, "turns": 3},
    ]
    assert lockstep.median_of(runs, "speedup") == {
        "speedup": 1.8,
        "speedups": [1.9, 1.7, 1.8],
        "turns": 3,
    }
    assert lockstep.repeats_line(lockstep.median_of(runs, "speedup"), "speedup") == (
        "the median of 3 pairs of processes: 1.900x, 1.700x, 1.800x"
    )
    assert lockstep.repeats_line(lockstep.median_of(runs[:1], "speedup"), "speedup") is None


def test_two_sides_fuzz_in_turns_each_on_its_own_path(benches, tmp_path):
    """The base is the installed schedcheck linked into a directory of its own (its
    compiled kernels are cached already), so both sides run the same code, from two
    paths, in turns."""
    lockstep, fuzz_lockstep = benches
    installed = Path(schedcheck.fuzz.__file__).resolve().parents[1]
    base_path = lockstep.link_installed(tmp_path / "path")
    args = fuzz_lockstep.parse_args(
        ["--base-path", str(base_path), "--turns", "2", "--warmup-turns", "0",
         "--examples-per-turn", "8"]
    )  # fmt: skip
    out = fuzz_lockstep.measure(args, base_path)
    base, head = out["base"], out["head"]
    assert base["examples"] == head["examples"] == 2 * 32  # whole rounds of 32
    assert min(base["cpu_s"], head["cpu_s"], base["setup_cpu_s"], head["setup_cpu_s"]) > 0
    assert base["imported_from"] == str(base_path / "schedcheck")  # its path came first
    assert head["imported_from"] != base["imported_from"]
    assert base["schedcheck"] == head["schedcheck"] == str(installed)  # the links resolved
    want = head["examples_per_cpu_s"] / base["examples_per_cpu_s"]
    assert out["speedup"] == pytest.approx(want)
    lo, hi = out["turn_speedup_quartiles"]
    assert lo <= out["turn_speedup_median"] <= hi


def test_the_base_is_required_and_the_counts_positive(benches, capsys):
    _, fuzz_lockstep = benches
    for argv in ([], ["--base-path", "x", "--turns", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            fuzz_lockstep.parse_args(argv)
        assert exit_info.value.code == 2
    assert "give the base" in capsys.readouterr().err


def test_a_base_path_whose_links_dangle_is_refused(benches, tmp_path, capsys):
    """A base linked to a worktree since removed would import the installed schedcheck:
    head against itself, reported as a ratio against the base."""
    lockstep, fuzz_lockstep = benches
    tree = tmp_path / "tree"
    (tree / "fuzz").mkdir(parents=True)
    (tree / "fuzz" / "__init__.py").write_text("")
    (tree / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "schedcheck.fuzz" = "fuzz" }\n'
    )
    link = lockstep.link_package(tree, tmp_path / "link")
    assert lockstep.has_package(link)
    (tree / "fuzz" / "__init__.py").unlink()
    (tree / "fuzz").rmdir()
    assert not lockstep.has_package(link)
    with pytest.raises(SystemExit) as exited:
        fuzz_lockstep.parse_args(["--base-path", str(link)])
    assert exited.value.code == 2
    assert "no schedcheck/fuzz/__init__.py" in capsys.readouterr().err
