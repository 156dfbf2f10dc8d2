"""Regression tests from findings: a bundle under tests/regressions/bundles/ and a pytest file.

The generated file holds two tests:

    test_no_violation        the engine's regression test: the bundle's requests and config
                             run with no violation. It passes on the clean engine and fails
                             when the mutant is switched on for the whole test run:
                                 SCHEDCHECK_MUTANT=NAME pytest tests/regressions
    test_the_mutant_is_caught
                             the bundle still catches its mutant: with the mutant on, the
                             run reproduces the recorded violations and fingerprint

A finding without a mutant (a bug of the engine itself, or a faulty toy engine) gets one
test, `test_the_bug_reproduces`, which asserts the recorded violations.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from pathlib import Path

from schedcheck.fuzz.shrink import bundle_run, failure_kind
from schedcheck.sim.bundles import same_violations
from schedcheck.sim.loop import RunResult
from schedcheck.traces.bundle import FILES, read_bundle, schedule_path

MUTANT_ENV = "SCHEDCHECK_MUTANT"


def replay(bundle: str | os.PathLike[str], mutant: str | None) -> RunResult:
    """The bundle's run with `mutant` in place of the recorded one."""
    parts, requests = bundle_run(bundle)
    return parts.with_mutant(mutant).run(requests)


def _mutant_from_env(bundle: str | os.PathLike[str]) -> str | None:
    """SCHEDCHECK_MUTANT, if it applies to the bundle's block manager (else None)."""
    name = os.environ.get(MUTANT_ENV) or None
    if name is None:
        return None
    from schedcheck.engines.reference.mutants import get_mutant

    parts, _ = bundle_run(bundle)
    component = get_mutant(name).component
    if component in ("hashed", "radix") and component != parts.config.block_manager:
        return None
    return name


def assert_clean(bundle: str | os.PathLike[str]) -> None:
    """No violation and no liveness failure (with SCHEDCHECK_MUTANT's mutant, if set)."""
    result = replay(bundle, _mutant_from_env(bundle))
    assert not failure_kind(result), _describe(result)


def assert_caught(bundle: str | os.PathLike[str], mutant: str | None) -> None:
    """The recorded violations (or liveness failure) and fingerprint come back."""
    recorded = read_bundle(bundle)
    result = replay(bundle, mutant)
    assert failure_kind(result), f"{bundle}: no longer fails with mutant {mutant}"
    assert same_violations(result, recorded.violations), _describe(result)
    assert result.fingerprint == recorded.summary["fingerprint"], "the schedule changed"


def _describe(result: RunResult) -> str:
    lines = [v.headline() for v in result.violations[:3]]
    lines += [f"stuck {rid}: {why}" for rid, why in sorted(result.stuck.items())[:3]]
    return "\n".join(lines) or "clean"


def bundle_headline(bundle: str | os.PathLike[str]) -> str:
    """The first recorded violation as `step N: invariant: where: message`, or liveness."""
    recorded = read_bundle(bundle)
    if not recorded.violations:
        stuck = recorded.summary.get("stuck") or {}
        return "liveness: " + "; ".join(f"{k}: {v}" for k, v in sorted(stuck.items())[:2])
    v = recorded.violations[0]
    labels = (
        ("request_id", "request"),
        ("position", "position"),
        ("slot", "slot"),
        ("block", "block"),
    )
    where = "".join(f" {label} {v[k]}" for k, label in labels if v.get(k) not in (None, "", -1))
    return f"step {v['step']}: {v['invariant']}:{where}: {v['message']}"


def slug(engine: str, block_manager: str, mutant: str | None) -> str:
    raw = f"{engine}_{block_manager}_{mutant or 'clean'}"
    return re.sub(r"[^a-z0-9]+", "_", raw.lower()).strip("_")


def write_regression(
    bundle: str | os.PathLike[str], regressions_dir: str | os.PathLike[str], headline: str = ""
) -> Path:
    """Copy the bundle to DIR/bundles/SLUG and write DIR/test_SLUG.py; returns the test."""
    parts, requests = bundle_run(bundle)
    headline = headline or bundle_headline(bundle)
    name = slug(parts.engine, parts.config.block_manager, parts.config.mutant)
    root = Path(regressions_dir)
    target = root / "bundles" / name
    assert target.resolve() != Path(bundle).resolve(), "copy from a bundle outside DIR"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    schedule = schedule_path(Path(bundle))
    for file_name in (*FILES, schedule.name):
        shutil.copyfile(Path(bundle) / file_name, target / file_name)
    (target / "command.txt").write_text(
        f"schedcheck replay --bundle tests/regressions/bundles/{name}\n", encoding="utf-8"
    )
    test_path = root / f"test_{name}.py"
    test_path.write_text(
        _test_source(name, parts.engine, parts.config.mutant, len(requests), headline),
        encoding="utf-8",
    )
    return test_path


_HEAD = """\"\"\"Regression: {what} ({engine}), {num_requests} requests (schedcheck fuzz).

{summary}

Replays the bundle (from tests/regressions/):
    schedcheck replay --bundle bundles/{name}
\"\"\"

from pathlib import Path

from schedcheck.fuzz.regression import {imports}

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / "bundles" / "{name}"
"""

_MUTANT_TESTS = """

def test_no_violation():
    \"\"\"Passes on the clean engine; fails with SCHEDCHECK_MUTANT={mutant}.\"\"\"
    assert_clean(BUNDLE)


def test_the_mutant_is_caught():
    assert_caught(BUNDLE, "{mutant}")
"""

_BUG_TESTS = """

def test_the_bug_reproduces():
    assert_caught(BUNDLE, None)
"""


def _docstring_safe(text: str) -> str:
    """`text` inside a triple-quoted docstring: no quote or backslash can end it early."""
    return textwrap.fill(text.replace(chr(92), "/").replace(chr(34), chr(39)), width=96)


def _test_source(
    name: str, engine: str, mutant: str | None, num_requests: int, headline: str
) -> str:
    what = f"mutant {mutant}" if mutant else "a bug of the engine"
    imports = "assert_caught, assert_clean" if mutant else "assert_caught"
    head = _HEAD.format(
        engine=engine,
        what=what,
        num_requests=num_requests,
        name=name,
        summary=_docstring_safe(headline[:300]),
        imports=imports,
    )
    return head + (_MUTANT_TESTS.format(mutant=mutant) if mutant else _BUG_TESTS)
