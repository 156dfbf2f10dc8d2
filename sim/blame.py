"""Who raised: the engine under test, or schedcheck itself (adapter, loop, checks).

A crash is blamed on the innermost frame of its traceback that is code of either side;
frames of the standard library and of the numeric libraries both sides call (numpy, torch,
simpy) say nothing about whose bug it is and are skipped::

    loop._call ─► adapter.schedule ─► vllm Scheduler.schedule ─► assert ...   engine-crash
    loop._call ─► adapter.schedule ─► request.resumed_from_preemption         harness-crash
                                      (the adapter read a field vLLM renamed)

The reference engine (`engines/reference/`, its mutants included) is an engine under test:
its frames are the engine's. Every other file of schedcheck's rooms is the harness.

The crash's case (its part of the finding's signature) is the exception type and that frame:
`AssertionError at vllm/v1/core/sched/scheduler.py:schedule:412`, with paths written the
same on every machine (relative to site-packages, or to schedcheck's root).
"""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

from schedcheck.engines.engine_fault import EngineFault
from schedcheck.engines.protocol import Engine, EngineConfig
from schedcheck.engines.registry import EngineLoadError, make_engine
from schedcheck.invariants.violation import Violation

ENGINE_CRASH = "engine-crash"
HARNESS_CRASH = "harness-crash"
ROOT = Path(__file__).resolve().parent.parent  # holds the rooms: sim/, engines/, ...
HARNESS_ROOMS = ("sim", "fuzz", "cli", "engines", "invariants", "gpu", "traces", "report")
ENGINE_ROOMS = ("engines/reference",)  # inside a harness room, but the engine under test
LIBRARIES = ("numpy", "torch", "simpy")  # called by both sides: never the culprit
_STDLIB = tuple(str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "platstdlib"))


def crash_violation(step: int, where: str, exc: BaseException) -> Violation:
    """The violation of an exception raised inside the engine call `where` (schedule,
    update_from_output, ...): an engine-crash if the engine's own code raised it, else a
    harness-crash, each with its frame as the case; an adapter's EngineFault is the
    violation it names, blamed on the engine."""
    trace = "".join(traceback.format_exception(exc))
    if isinstance(exc, EngineFault):
        message = f"{where}: {exc.message}"
        return Violation(
            exc.invariant, step, message, request_id=exc.request_id, found=trace, case=exc.case
        )
    is_harness, case = crash_case(exc)
    if is_harness:
        message = f"the harness raised {type(exc).__name__} in {where}: {exc}"
        return Violation(HARNESS_CRASH, step, message, found=trace, case=case)
    message = f"{where}: {type(exc).__name__}: {exc}"
    return Violation(ENGINE_CRASH, step, message, found=trace, case=case)


def harness_crash(step: int, exc: BaseException) -> Violation:
    """The violation of an exception raised outside any engine call (the harness's, unless
    it is an adapter's EngineFault: then the engine's, wherever the adapter saw it)."""
    if isinstance(exc, EngineFault):
        return crash_violation(step, "step", exc)
    _, case = crash_case(exc)
    return Violation(
        HARNESS_CRASH,
        step,
        f"the harness raised {type(exc).__name__}: {exc}",
        found="".join(traceback.format_exception(exc)),
        case=case,
    )


def build_engine(name: str, config: EngineConfig) -> Engine:
    """The engine `name` built for `config`; an engine that cannot even be built is bad
    input (EngineLoadError, exit 2), a refused config stays a refusal (ValueError)."""
    try:
        return make_engine(name, config)
    except ValueError:  # EngineRefusal and EngineLoadError included: already bad input
        raise
    except Exception as exc:
        raise EngineLoadError(setup_error(name, exc)) from exc


def setup_error(engine: str, exc: BaseException) -> str:
    """One line for an engine that cannot even be built (its factory raised: a wrong path
    in the user's environment, a missing package): bad input, exit 2, not a finding."""
    _, case = crash_case(exc)
    return f"engine {engine!r}: its factory raised {type(exc).__name__}: {exc} ({case})"


def crash_case(exc: BaseException) -> tuple[bool, str]:
    """(whether schedcheck's harness raised it, `Type at path:function:line`)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):  # bounded: the traceback's frames, innermost first
        path = Path(frame.filename)
        if _is_library(path):
            continue
        where = f"{_portable(path)}:{frame.name}:{frame.lineno}"
        return _is_harness(path), f"{type(exc).__name__} at {where}"
    return False, type(exc).__name__  # raised by a library alone (no frame of either side)


def _is_library(path: Path) -> bool:
    text = str(path)
    if text.startswith("<") or (text.startswith(_STDLIB) and "site-packages" not in text):
        return True
    parts = path.parts
    return any(
        parts[i] == "site-packages" and parts[i + 1] in LIBRARIES for i in range(len(parts) - 1)
    )


def _is_harness(path: Path) -> bool:
    relative = _under_root(path)
    if relative is None:
        return False
    text = relative.as_posix()
    if any(text.startswith(room + "/") for room in ENGINE_ROOMS):
        return False
    return relative.parts[0] in HARNESS_ROOMS


def _under_root(path: Path) -> Path | None:
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return None


def _portable(path: Path) -> str:
    """The frame's file as every machine and install writes it: schedcheck's own relative
    to its rooms (`engines/vllm/v1/adapter.py`), a package's relative to site-packages
    (`vllm/v1/core/block_pool.py`), anything else (a user's engine module) by its name."""
    relative = _under_root(path)
    if relative is not None and relative.parts[0] in HARNESS_ROOMS:
        return relative.as_posix()
    parts = path.parts
    if "site-packages" in parts:
        index = len(parts) - 1 - parts[::-1].index("site-packages")
        return "/".join(parts[index + 1 :])
    return path.name
