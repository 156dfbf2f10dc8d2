"""docs/hooks.py puts a feature page into its nav section once the page exists."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks.py"
_spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS)
assert _spec is not None and _spec.loader is not None
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)


def nav() -> list:
    return [{"Home": "index.md"}, {"How-to guides": [{"A": "a.md"}]}, {"Results": []}]


def test_a_present_page_lands_in_its_section(tmp_path):
    (tmp_path / "performance.md").write_text("# p\n")
    (tmp_path / "reports.md").write_text("# r\n")
    config = hooks.on_config({"nav": nav(), "docs_dir": str(tmp_path)})
    assert config["nav"] == [
        {"Home": "index.md"},
        {"How-to guides": [{"A": "a.md"}, {"Read a finding's report": "reports.md"}]},
        {"Results": [{"Performance": "performance.md"}]},
    ]


def test_an_absent_page_is_left_out_and_a_listed_one_not_repeated(tmp_path):
    (tmp_path / "performance.md").write_text("# p\n")
    listed = [{"Results": [{"Perf": "performance.md"}]}, {"How-to guides": []}]
    config = hooks.on_config({"nav": listed, "docs_dir": str(tmp_path)})
    assert config["nav"] == [{"Results": [{"Perf": "performance.md"}]}, {"How-to guides": []}]
