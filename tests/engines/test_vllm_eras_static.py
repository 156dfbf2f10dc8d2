"""The vLLM adapters branch on releases only through their era shims (engines/vllm/v1/eras.py,
engines/vllm/v0/eras.py), each listed in that module's era table with its feature test.

Read with `ast` only: runs with no vLLM installed. Fails naming `file:line` for

- a release comparison outside an eras.py: a comparison with a version-like string
  ("0.11.0", "0.5."), `startswith` on one, a comparison of anything named *version*,
  `release_key(...)`, `Version(...)`; and any read of `__version__`, `version_tuple`,
  `Version(...)` or `importlib.metadata.version(...)` there;
- an era shim called from outside its eras.py that the era table does not list;
- an era table row naming a shim its module does not define.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from schedcheck.engines.vllm.v0 import eras as v0_eras
from schedcheck.engines.vllm.v1 import eras as v1_eras

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_ROOT = REPO_ROOT / "engines" / "vllm"
ERAS_MODULES = {"v1": v1_eras, "v0": v0_eras}
# what an eras module offers besides its shims: the supported range and the table itself
RANGE_NAMES = frozenset(
    {
        "OLDEST",
        "NEWEST",
        "SUPPORTED_RANGE",
        "SUPPORTED_RELEASES",
        "installed_release",
        "unsupported_reason",
        "release_key",
        "ERAS",
        "Era",
        "DISTRIBUTIONS",
        "newer_than_known",
        "DRAFT_METHOD_KEY",
        "DRAFT_METHODS",
    }
)
VERSION_TEXT = re.compile(r"^v?\d+\.\d+(\.|$)")  # "0.11.0", "0.5.", "0.33", not "0.1x" prose
VERSION_READS = frozenset({"__version__", "version_tuple"})
VERSION_CALLS = frozenset({"Version", "parse_version", "release_key"})


def adapter_sources() -> list[Path]:
    """Every Python file under engines/vllm/ but the eras modules, sorted."""
    files = sorted(p for p in VLLM_ROOT.rglob("*.py") if "__pycache__" not in p.parts)
    return [p for p in files if p.name != "eras.py"]


def _name(node: ast.AST) -> str:
    """The last identifier of a Name, Attribute or Call node ('' for anything else)."""
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _is_version_text(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(VERSION_TEXT.match(node.value))
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_version_text(e) for e in node.elts)
    return False


def _is_versionish(node: ast.AST) -> bool:
    """An operand that stands for a release: its text, or a value named after a version."""
    if _is_version_text(node):
        return True
    name = _name(node)
    return "version" in name.lower() or name in VERSION_CALLS | VERSION_READS


def _is_metadata_version(node: ast.Call) -> bool:
    """`importlib.metadata.version(...)` or `metadata.version(...)`."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "version"
        and _name(func.value) in {"metadata", "importlib_metadata"}
    )


def release_comparisons(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each release comparison or version read in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_versionish(o) for o in operands):
                yield node.lineno, "compares a release"
        elif isinstance(node, ast.Call):
            name = _name(node.func)
            if name in {"startswith", "endswith"} and any(_is_version_text(a) for a in node.args):
                yield node.lineno, f"{name}() on a version"
            elif name in VERSION_CALLS:
                yield node.lineno, f"calls {name}()"
            elif _is_metadata_version(node):
                yield node.lineno, "reads the installed version"
        elif isinstance(node, ast.Attribute | ast.Name) and _name(node) in VERSION_READS:
            yield node.lineno, f"reads {_name(node)}"


def _rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def test_no_release_comparison_outside_the_era_shims():
    offenders = [
        f"{_rel(path)}:{line}: {what}"
        for path in adapter_sources()
        for line, what in release_comparisons(path.read_text())
    ]
    assert offenders == [], (
        "release branches outside engines/vllm/*/eras.py (make a shim there with a feature "
        "test, and list it in that module's ERAS):\n" + "\n".join(offenders)
    )


def test_the_scan_sees_what_it_must():
    source = '''
"""Docstrings and comments name releases freely: 0.11.0 on, before 0.2x."""
import importlib.metadata
import vllm
from packaging.version import Version

def f(so, version, release):
    a = vllm.__version__ >= "0.6"             # 8
    b = version == "0.5.4"                    # 9
    c = release.startswith("0.5.")            # 10
    d = release in ("0.5.4", "0.6.0")         # 11
    e = Version(release) < Version("0.11")    # 12
    g = vllm.version_tuple                    # 13
    h = importlib.metadata.version("vllm")    # 14
    i = self.version == other                 # 15
    ok = so.name == "0.1x prose" or len(so) > 0  # 0.12.0: a comment
    return a, b, c, d, e, g, h, i, ok
'''
    lines = sorted({line for line, _ in release_comparisons(source)})
    assert lines == [8, 9, 10, 11, 12, 13, 14, 15]


def era_table_shims(module: object) -> set[str]:
    return {shim for era in module.ERAS for shim in era.shims}  # type: ignore[attr-defined]


def defined_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("generation", sorted(ERAS_MODULES))
def test_every_era_names_shims_its_module_defines(generation):
    module = ERAS_MODULES[generation]
    defined = defined_functions(VLLM_ROOT / generation / "eras.py")
    missing = sorted(era_table_shims(module) - defined)
    assert missing == [], f"engines/vllm/{generation}/eras.py: ERAS names undefined {missing}"
    for era in module.ERAS:
        assert VERSION_TEXT.match(era.release) and era.feature_test and era.shims, era


def eras_uses(source: str, generation: str) -> Iterator[tuple[int, str]]:
    """(line, name) of each name of `generation`'s eras module used in `source`: as
    `eras.NAME` after importing the module, or imported by name from it."""
    module = f"schedcheck.engines.vllm.{generation}.eras"
    aliases: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == module.rpartition(".")[0]:
            aliases |= {a.asname or a.name for a in node.names if a.name == "eras"}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            yield node.lineno, node.attr


@pytest.mark.parametrize("generation", sorted(ERAS_MODULES))
def test_the_adapter_calls_only_listed_shims(generation):
    allowed = era_table_shims(ERAS_MODULES[generation]) | RANGE_NAMES
    offenders = [
        f"{_rel(path)}:{line}: eras.{name}"
        for path in adapter_sources()
        for line, name in eras_uses(path.read_text(), generation)
        if name not in allowed
    ]
    assert offenders == [], (
        f"shims of engines/vllm/{generation}/eras.py used but not in its ERAS table:\n"
        + "\n".join(offenders)
    )


def test_the_shim_scan_sees_what_it_must():
    source = (
        "from schedcheck.engines.vllm.v1 import eras\n"
        "from schedcheck.engines.vllm.v1.eras import block_hash_bytes, not_listed\n"
        "x = eras.resumed_req_ids(c) + eras.unlisted(c)\n"
    )
    assert sorted(eras_uses(source, "v1")) == [
        (2, "block_hash_bytes"),
        (2, "not_listed"),
        (3, "resumed_req_ids"),
        (3, "unlisted"),
    ]
