"""The invariant catalog lists exactly the names the code reports.

Names are found in the source with `ast`: the first argument of every call to `Violation`
(or a helper that builds one) when it is a string literal, and every string literal shaped
like `<group>.<name>` for a group the catalog knows.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from schedcheck.invariants.catalog import INVARIANTS, INVARIANTS_BY_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sim", "fuzz", "invariants", "engines", "gpu", "traces")
BUILDERS = {"Violation", "_violate", "bad"}  # callables whose first argument is a name
RUN_KINDS = {"liveness", "harness-crash", "engine-crash"}
FILE_SUFFIXES = {"json", "jsonl", "txt", "py", "md", "xz", "gz", "csv"}  # outputs.json is a file


def _prefixes() -> set[str]:
    return {name.split(".")[0] for name in INVARIANTS_BY_NAME if "." in name}


def _reported_names() -> dict[str, str]:
    """name -> the first file:line reporting it."""
    shaped = re.compile(rf"^({'|'.join(map(re.escape, _prefixes()))})\.[a-z][a-z-]*$")
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path.name == "catalog.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                name = _name_in(node, shaped)
                if name:
                    found.setdefault(name, f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


def _name_in(node: ast.AST, shaped: re.Pattern[str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        value = node.value
        if value.rpartition(".")[2] in FILE_SUFFIXES:
            return None
        return value if shaped.match(value) or value in RUN_KINDS else None
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        if called in BUILDERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def test_every_reported_name_is_in_the_catalog():
    missing = {n: at for n, at in _reported_names().items() if n not in INVARIANTS_BY_NAME}
    assert missing == {}, "add these to invariants/catalog.py, then run docs/gen_reference.py"


def test_every_catalog_name_is_reported_somewhere():
    reported = _reported_names()
    unused = sorted(i.name for i in INVARIANTS if i.name not in reported)
    assert unused == []


def test_the_scan_sees_the_names_it_must():
    """The scanner itself: known reports at known places (so the tests above can fail)."""
    reported = _reported_names()
    assert reported["shadow-kv.read"].startswith("sim/bad_reads.py:")
    assert reported["accounting.budget"].startswith("invariants/accounting.py:")
    assert reported["engine-crash"].startswith("sim/blame.py:")
    assert reported["protocol.lost-request"].startswith("invariants/protocol.py:")
    assert len(INVARIANTS) == 49
