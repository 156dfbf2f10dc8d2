"""The shape of the tree, held by a test as TigerBeetle's `tidy.zig` holds its own.

Read with `ast` and plain text only, so it runs with no engine, no torch, nothing installed:

- every function and method of the product fits on a screen (FUNCTION_LINES_MAX);
- every product file fits its line budget (FILE_LINES_DEFAULT, or its own named budget with
  the reason it is longer, so that no file grows past the default unnoticed);
- imports point down the rooms (ROOMS, lowest first; a room imports itself and any room
  below it), and `gpu/` never imports `sim/` (the loop loads a tensor executor by name);
- no module imports itself back through others (module-level, function-local and
  `if TYPE_CHECKING:` imports all count: a cycle hidden in a function or behind a type
  annotation is still a cycle of the design);
- nothing in the product, the tests or the docs points at files outside the repository (a
  fresh clone has only what it holds: docs/bug-classes.md is the bug-class table).

Each test names every offender in its failure message, as `file:line` rows.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# The product's rooms, lowest first (docs/architecture.md draws them).
ROOMS = ("engines", "traces", "invariants", "sim", "gpu", "fuzz", "report", "cli")
# Imports the order alone would allow but the design forbids: (importer room, imported room).
FORBIDDEN_ROOM_IMPORTS = {("gpu", "sim"): "the loop loads the tensor executor by name"}

FUNCTION_LINES_MAX = 70
FILE_LINES_DEFAULT = 400
# Files longer than the default, each with its budget and why it is longer. A file may grow
# to its budget; past it, split it or raise the budget here with a reason.
FILE_LINES_BUDGET: dict[str, tuple[int, str]] = {
    "sim/symbolic.py": (800, "the symbolic executor: shadow-KV writes and every read path"),
    "engines/reference/scheduler.py": (
        750,
        "the reference scheduler kept in one readable file, as vLLM's Scheduler is",
    ),
    "cli/commands/fuzz.py": (510, "`schedcheck fuzz`: campaign, continue and shrink modes"),
    "engines/protocol.py": (
        420,
        "the one protocol every engine implements: its boundary objects, and every optional "
        "snapshot member documented where engine authors read them",
    ),
    "cli/commands/trace.py": (430, "`schedcheck trace`: four subcommands (import|gen|stats|head)"),
    "cli/commands/replay.py": (410, "`schedcheck replay`: every engine and run option"),
    "engines/vllm/v1/eras.py": (
        520,
        "the v1 era table and every shim it names, in one file (seven releases; "
        "tests/engines/test_vllm_eras_static.py reads them there), with the bulk forms "
        "of the hash shims the pool check reads every step and the shapes read once a class "
        "(and, since 2026-12-07, the fault points' eras: reset_running_requests, pause_states)",
    ),
}

# Files and folders the outside-reference scan reads (relative to the repository root).
SCANNED_ROOTS = (*ROOMS, "tests", "docs", "bench", "README.md", "mkdocs.yml", "pyproject.toml")
SCANNED_SUFFIXES = {".py", ".md", ".sh", ".toml", ".ini", ".yml", ".yaml", ".txt", ".cfg"}
# Written so that this file does not match itself: the numbered rows of a bug table that
# lives outside the repository, that table's file name, and the shared folder beside it.
OUTSIDE_REFERENCE = re.compile(r"BUGS(\.md)?\s*#\s*\d|BUGS\.md|\.\./shared\b|/work/share[d]\b")


def product_files() -> list[Path]:
    """Every Python file of the product rooms, tracked or new, sorted."""
    files = [p for room in ROOMS for p in (REPO_ROOT / room).rglob("*.py")]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def module_name(path: Path) -> str:
    """`sim/loop.py` -> `schedcheck.sim.loop`; a package's `__init__.py` names the package."""
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["schedcheck", *parts])


# ---------------------------------------------------------------------------------------
# Function length and file length


def long_functions(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            num_lines = node.end_lineno - node.lineno + 1
            if num_lines > FUNCTION_LINES_MAX:
                yield f"{rel(path)}:{node.lineno}: {node.name} has {num_lines} lines"


def test_no_function_is_longer_than_a_screen():
    offenders = [row for path in product_files() for row in long_functions(path)]
    assert offenders == [], (
        f"functions over {FUNCTION_LINES_MAX} lines (split them into named steps):\n"
        + "\n".join(offenders)
    )


def test_every_file_fits_its_line_budget():
    offenders = []
    for path in product_files():
        num_lines = len(path.read_text().splitlines())
        budget, _ = FILE_LINES_BUDGET.get(rel(path), (FILE_LINES_DEFAULT, ""))
        if num_lines > budget:
            offenders.append(f"{rel(path)}: {num_lines} lines, budget {budget}")
    assert offenders == [], (
        "files over their line budget (split them, or give the file its own budget in "
        "FILE_LINES_BUDGET with the reason):\n" + "\n".join(offenders)
    )


def test_every_named_budget_is_still_needed():
    """A budget outlives its reason when the file is gone or fits the default again."""
    stale = []
    for name, (budget, reason) in FILE_LINES_BUDGET.items():
        assert budget > FILE_LINES_DEFAULT and reason, name
        path = REPO_ROOT / name
        if not path.is_file():
            stale.append(f"{name}: no such file")
        elif len(path.read_text().splitlines()) <= FILE_LINES_DEFAULT:
            stale.append(f"{name}: fits the default of {FILE_LINES_DEFAULT} lines now")
    assert stale == [], "remove these entries from FILE_LINES_BUDGET:\n" + "\n".join(stale)


# ---------------------------------------------------------------------------------------
# The import graph


@dataclass(frozen=True, slots=True)
class Edge:
    importer: str  # module name
    imported: str  # module name (a package when the name imported is not a module)
    where: str  # file:line
    when: str  # LOADS (with the module), CALLED (inside a function) or TYPING (type checkers)


def reached_modules(node: ast.Import | ast.ImportFrom, package: str, modules: set[str]) -> set[str]:
    """The modules an import statement reaches, relative imports resolved: `from pkg import
    name` reaches the module `pkg.name` when there is one, else `pkg` (name is defined there)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    submodules = (f"{base}.{alias.name}" for alias in node.names)
    return {name if name in modules else base for name in submodules}


LOADS, CALLED, TYPING = "", " (in a function)", " (if TYPE_CHECKING)"


def imports_of(path: Path) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement of a file, with when it runs (LOADS, CALLED or TYPING)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    stack: list[tuple[ast.AST, str]] = [(tree, LOADS)]
    while stack:  # bounded: each node of the tree is pushed once
        node, when = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, when
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            when = when or CALLED
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend((child, when) for child in node.orelse)
            stack.extend((child, when or TYPING) for child in node.body)
            continue
        stack.extend((child, when) for child in ast.iter_child_nodes(node))


def import_edges(files: list[Path]) -> list[Edge]:
    """The product's imports of its own modules, every statement of every file."""
    modules = {module_name(p) for p in files}
    edges = set()
    for path in files:
        importer = module_name(path)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node, when in imports_of(path):
            for name in sorted(reached_modules(node, package, modules)):
                if name.startswith("schedcheck.") and name != importer:
                    edges.add(Edge(importer, name, f"{rel(path)}:{node.lineno}", when))
    return sorted(edges, key=lambda e: (e.where, e.imported))


def room_of(module: str) -> str:
    return module.split(".")[1]


def layering_offenders(edges: list[Edge]) -> list[str]:
    rows = []
    for edge in edges:
        low, high = room_of(edge.imported), room_of(edge.importer)
        if ROOMS.index(low) > ROOMS.index(high):
            rows.append(f"{edge.where}: {high}/ imports {edge.imported} ({low}/ is above it)")
        elif (high, low) in FORBIDDEN_ROOM_IMPORTS:
            why = FORBIDDEN_ROOM_IMPORTS[(high, low)]
            rows.append(f"{edge.where}: {high}/ imports {edge.imported} ({why})")
    return rows


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """The strongly connected components of the module graph with more than one module,
    each as the edges that hold it together."""
    successors: dict[str, set[str]] = {}
    for edge in edges:
        successors.setdefault(edge.importer, set()).add(edge.imported)

    def reachable(start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:  # bounded: each module is pushed once
            for nxt in successors.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reach = {module: reachable(module) for module in sorted(successors)}
    components: list[list[Edge]] = []
    placed: set[str] = set()
    for module in sorted(reach):
        if module in placed:
            continue
        component = {m for m in reach[module] if module in reach.get(m, ())}
        placed |= component
        if len(component) > 1:
            components.append(
                [e for e in edges if e.importer in component and e.imported in component]
            )
    return components


def test_imports_point_down_the_rooms():
    offenders = layering_offenders(import_edges(product_files()))
    order = " < ".join(ROOMS)
    assert offenders == [], f"imports against the layering ({order}):\n" + "\n".join(offenders)


def test_no_module_imports_itself_back():
    found = cycles(import_edges(product_files()))
    rows = []
    for component in found:
        rows.append("cycle:")
        rows.extend(f"  {e.where}: {e.importer} -> {e.imported}{e.when}" for e in component)
    assert rows == [], "module import cycles (move the shared piece down):\n" + "\n".join(rows)


def test_the_import_graph_sees_what_it_must(tmp_path, monkeypatch):
    """Relative, function-local, type-checking and `from package import module` imports
    are all edges."""
    monkeypatch.setattr(f"{__name__}.REPO_ROOT", tmp_path)
    (tmp_path / "sim").mkdir()
    (tmp_path / "gpu").mkdir()
    for name in ("sim/__init__.py", "gpu/__init__.py", "gpu/model.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "sim" / "loop.py").write_text(
        "from . import clock\nfrom .clock import now\n"
        "def run():\n    from schedcheck.gpu import model\n"
    )
    (tmp_path / "sim" / "clock.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import schedcheck.sim.loop\n"
    )
    (tmp_path / "gpu" / "replay.py").write_text("from schedcheck.sim.loop import run\n")
    files = sorted(tmp_path.rglob("*.py"))
    edges = import_edges(files)
    assert {(e.importer, e.imported, e.when) for e in edges} == {
        ("schedcheck.sim.loop", "schedcheck.sim.clock", LOADS),
        ("schedcheck.sim.loop", "schedcheck.gpu.model", CALLED),
        ("schedcheck.sim.clock", "schedcheck.sim.loop", TYPING),
        ("schedcheck.gpu.replay", "schedcheck.sim.loop", LOADS),
    }
    assert layering_offenders(edges) == [
        "gpu/replay.py:1: gpu/ imports schedcheck.sim.loop "
        "(the loop loads the tensor executor by name)",
        "sim/loop.py:4: sim/ imports schedcheck.gpu.model (gpu/ is above it)",
    ]
    assert [sorted({e.importer for e in c}) for c in cycles(edges)] == [
        ["schedcheck.sim.clock", "schedcheck.sim.loop"]
    ]


def test_the_real_graph_is_read():
    edges = import_edges(product_files())
    assert len(product_files()) > 150 and len(edges) > 300
    assert any(e.importer == "schedcheck.sim.symbolic" for e in edges)
    assert {LOADS, CALLED} <= {e.when for e in edges}


# ---------------------------------------------------------------------------------------
# References outside the repository


def scanned_files() -> Iterator[Path]:
    for root in SCANNED_ROOTS:
        path = REPO_ROOT / root
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for candidate in candidates:
            skipped = "__pycache__" in candidate.parts or candidate.suffix not in SCANNED_SUFFIXES
            if candidate.is_file() and not skipped:
                yield candidate


def test_nothing_points_outside_the_repository():
    offenders = [
        f"{rel(path)}:{i}: {line.strip()[:100]}"
        for path in scanned_files()
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE_REFERENCE.search(line)
    ]
    assert offenders == [], (
        "references to files a clone does not have (name the mutant and the upstream issue, "
        "or link docs/bug-classes.md):\n" + "\n".join(offenders)
    )


def test_the_outside_pattern_sees_what_it_must():
    table = "BUGS"
    assert OUTSIDE_REFERENCE.search(f"draft KV slots ({table} #10)")
    assert OUTSIDE_REFERENCE.search(f"({table}.md #3, #4)")
    assert OUTSIDE_REFERENCE.search(f"see {table}.md")
    assert OUTSIDE_REFERENCE.search("see ../" + "shared/GPU_NOTES.md")
    assert not OUTSIDE_REFERENCE.search("bug class 10 (vllm#16370, docs/bug-classes.md)")
    assert not OUTSIDE_REFERENCE.search("shared_prefix, ../" + "sharedness")
