"""The committed reference pages are exactly what docs/gen_reference.py makes from the code.

A new command, flag, invariant or mutant without `python docs/gen_reference.py` fails here.
"""

from __future__ import annotations

from types import ModuleType

import pytest


@pytest.mark.parametrize("page", ["cli.md", "invariants.md", "mutant-catalog.md"])
def test_the_committed_page_is_what_the_code_generates(gen_reference: ModuleType, page: str):
    committed = (gen_reference.REFERENCE / page).read_text()
    assert committed == gen_reference.PAGES[page](), (
        f"docs/reference/{page} is stale: run python docs/gen_reference.py and commit it"
    )


def test_the_cli_page_names_every_subcommand_and_flag(gen_reference: ModuleType):
    from schedcheck.cli.entry import build_parser

    page = gen_reference.cli_page()
    for path, sub in gen_reference._walk(build_parser(), ("schedcheck",)):
        assert f"`{' '.join(path)}`" in page
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in page or f", {flag}" in page, (path, flag)


def test_check_mode_names_a_stale_page(gen_reference: ModuleType, tmp_path, monkeypatch):
    monkeypatch.setattr(gen_reference, "REFERENCE", tmp_path)
    for name, make in gen_reference.PAGES.items():
        (tmp_path / name).write_text(make())
    assert gen_reference.main(["--check"]) == 0
    (tmp_path / "cli.md").write_text("# old\n")
    assert gen_reference.main(["--check"]) == 1
    assert gen_reference.stale_pages() == ["cli.md"]
