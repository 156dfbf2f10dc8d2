"""docs/architecture.md against the tree as it is: the map names every room and every
subpackage, names no path that does not exist, and states the import order that
tests/test_structure.py holds."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE = REPO_ROOT / "docs" / "architecture.md"


def load_structure_test() -> ModuleType:
    """tests/test_structure.py, for its ROOMS (tests/ is not a package)."""
    path = REPO_ROOT / "tests" / "test_structure.py"
    spec = importlib.util.spec_from_file_location("structure_rules", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


STRUCTURE = load_structure_test()
AROUND = ("tests", "bench", "docs")
TOP = (*STRUCTURE.ROOMS, *AROUND)
# A path the page names: a top-level folder, then anything a path holds. Placeholders
# (`engines/<name>/`) and globs stop a match before them and are not checked.
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP)})/[\w./-]*)")


def named_paths(text: str) -> set[str]:
    """Every repository path the text names, as written (a folder keeps its slash)."""
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if text[match.end() : match.end() + 1] in ("<", "*"):
            path = path.rsplit("/", 1)[0] + "/"  # `traces/importers/<format>.py` names the folder
        found.add(path)
    return found


def subpackages() -> list[str]:
    """Every folder of the product with an `__init__.py`, as `room/sub/`."""
    inits = [p for room in STRUCTURE.ROOMS for p in (REPO_ROOT / room).rglob("__init__.py")]
    return sorted(f"{p.parent.relative_to(REPO_ROOT).as_posix()}/" for p in inits)


def test_the_map_names_every_room_and_subpackage():
    named = named_paths(PAGE.read_text())
    missing = [f"{top}/" for top in TOP if f"{top}/" not in named]
    missing += [folder for folder in subpackages() if folder not in named]
    assert missing == [], "docs/architecture.md does not name: " + ", ".join(missing)


def test_every_path_the_map_names_exists():
    missing = sorted(p for p in named_paths(PAGE.read_text()) if not (REPO_ROOT / p).exists())
    assert missing == [], "docs/architecture.md names paths the tree does not have: " + ", ".join(
        missing
    )


def test_the_map_states_the_import_order_the_structure_test_holds():
    assert " < ".join(STRUCTURE.ROOMS) in PAGE.read_text()


def test_the_path_finder_sees_what_it_must():
    text = (
        "`engines/vllm/v1/` and sim/loop.py, then `traces/importers/<format>.py`; "
        "`report/figures/`. Not schedcheck.sim.loop nor xsim/loop.py."
    )
    assert named_paths(text) == {
        "engines/vllm/v1/",
        "sim/loop.py",
        "traces/importers/",
        "report/figures/",
    }
