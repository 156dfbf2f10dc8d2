"""bench/fuzz_lockstep.py: a version of schedcheck linked from its tree as pyproject.toml
maps it, and two sides (here the same code twice) fuzzing in turns, each turn's examples
and CPU time to its side."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

import schedcheck.fuzz

BENCH = Path(__file__).resolve().parents[2] / "bench"
REPO = BENCH.parent


@pytest.fixture(scope="module")
def lockstep():
    spec = importlib.util.spec_from_file_location("fuzz_lockstep", BENCH / "fuzz_lockstep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tree_is_linked_as_its_pyproject_maps_it(lockstep, tmp_path):
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


def test_a_nested_subpackage_mapping_is_refused(lockstep, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "schedcheck.sim.x" = "x" }\n'
    )
    with pytest.raises(AssertionError):
        lockstep.link_package(tmp_path, tmp_path / "path")


def test_two_sides_fuzz_in_turns_each_on_its_own_path(lockstep, tmp_path):
    """The base is the installed schedcheck linked into a directory of its own (a tree
    whose pyproject.toml maps each subpackage to the installed one: its compiled kernels
    are cached already), so both sides run the same code, from two paths, in turns."""
    installed = Path(schedcheck.fuzz.__file__).resolve().parents[1]
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    subpackages = sorted(name.partition(".")[2] for name in mapping["package-dir"])
    tree = tmp_path / "tree"
    tree.mkdir()
    pairs = ", ".join(f'"schedcheck.{sub}" = "{installed / sub}"' for sub in subpackages)
    (tree / "pyproject.toml").write_text(f"[tool.setuptools]\npackage-dir = {{ {pairs} }}\n")
    base_path = lockstep.link_package(tree, tmp_path / "path")
    args = lockstep.parse_args(
        ["--base-path", str(base_path), "--turns", "2", "--warmup-turns", "0",
         "--examples-per-turn", "8"]
    )  # fmt: skip
    out = lockstep.measure(args, base_path)
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


def test_the_base_is_required_and_the_counts_positive(lockstep, capsys):
    for argv in ([], ["--base-path", "x", "--turns", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            lockstep.parse_args(argv)
        assert exit_info.value.code == 2
    assert "give the base" in capsys.readouterr().err
