"""The reference engine reads as a clean scheduler (issue 20): no mutant is woven into it,
and every function of it is readable at once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.reference.engine import make_engine
from schedcheck.engines.reference.hashed_manager import HashedKVManager
from schedcheck.engines.reference.mutants import ENGINE_MUTANTS, MUTANTS, engine_parts
from schedcheck.engines.reference.radix_manager import RadixKVManager
from schedcheck.engines.reference.scheduler import Scheduler

ENGINES = Path(__file__).resolve().parents[2] / "engines"
CLEAN_MODULES = [
    *(
        ENGINES / "reference" / f"{name}.py"
        for name in (
            "scheduler",
            "hashed_manager",
            "radix_manager",
            "block_pool",
            "free_queue",
            "free_queue_kernels",
            "block_hash",
            "radix_cache",
            "request",
            "request_queue",
            "kv_manager",
            "chunking",
            "snapshot",
            "fast_output",
        )
    ),
    ENGINES / "metadata.py",
]
LONGEST_FUNCTION_LINES = 50


@pytest.mark.parametrize("path", CLEAN_MODULES, ids=lambda p: p.name)
def test_the_clean_code_never_mentions_a_mutant(path: Path) -> None:
    lines = [n for n, line in enumerate(path.read_text().splitlines(), 1) if "mutant" in line]
    assert lines == [], f"{path.name}: lines {lines}"


def test_every_function_of_the_reference_engine_is_under_fifty_lines() -> None:
    paths = [
        *(ENGINES / "reference").glob("*.py"),
        *(ENGINES / "reference" / "mutants").glob("*.py"),
    ]
    too_long = []
    for path in [*paths, ENGINES / "metadata.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                num_lines = node.end_lineno - node.lineno + 1
                if num_lines > LONGEST_FUNCTION_LINES:
                    too_long.append(f"{path.name}:{node.lineno} {node.name} ({num_lines} lines)")
    assert too_long == []


def test_no_mutant_builds_the_clean_classes() -> None:
    assert type(make_engine(EngineConfig()).scheduler) is Scheduler
    assert type(make_engine(EngineConfig()).kv_manager) is HashedKVManager
    assert type(make_engine(EngineConfig(block_manager="radix")).kv_manager) is RadixKVManager
    for runner_mutant in ("slot-mapping-from-zero", "seq-len-full-prompt"):
        engine = make_engine(EngineConfig(mutant=runner_mutant))
        assert (type(engine.scheduler), type(engine.kv_manager)) == (Scheduler, HashedKVManager)


@pytest.mark.parametrize("name", sorted(ENGINE_MUTANTS))
def test_an_engine_mutant_replaces_exactly_one_clean_class(name: str) -> None:
    component = next(m.component for m in MUTANTS if m.name == name)
    block_manager = component if component in ("hashed", "radix") else "hashed"
    parts = engine_parts(name, block_manager)
    clean = engine_parts(None, block_manager)
    changed = [
        f
        for f in ("scheduler", "hashed", "radix", "hasher")
        if getattr(parts, f) is not getattr(clean, f)
    ]
    assert len(changed) == 1
    replaced = getattr(parts, changed[0])
    assert issubclass(replaced, getattr(clean, changed[0]))
    assert replaced.__doc__ is not None and replaced.__doc__.startswith(f"{name} (bug class")


def test_a_block_manager_mutant_needs_its_block_manager() -> None:
    with pytest.raises(ValueError, match="run it with block_manager='radix'"):
        engine_parts("radix-leak-chunk-kv", "hashed")
    with pytest.raises(ValueError, match="unknown mutant 'nope'"):
        engine_parts("nope", "hashed")
