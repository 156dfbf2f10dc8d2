"""sim/blame.py: a crash is blamed by the frame that raised it; an adapter's EngineFault is
the engine's finding wherever it is raised."""

import pytest

from schedcheck.engines.engine_fault import EngineFault
from schedcheck.sim.blame import crash_case, crash_violation, harness_crash


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # the traceback is the point
        return caught


def test_an_exception_raised_in_a_users_module_is_the_engine():
    exc = _raised(ValueError("bad"))  # raised in this test file: a module of the user's
    assert crash_case(exc) == (False, "ValueError at test_crash_blame.py:_raised:12")
    v = crash_violation(3, "schedule", exc)
    assert (v.invariant, v.signature) == (
        "engine-crash",
        "engine-crash[ValueError at test_crash_blame.py:_raised:12]",
    )


def test_an_exception_raised_in_schedcheck_code_is_a_harness_crash():
    from schedcheck.sim import blame

    with pytest.raises(AttributeError) as info:
        blame._portable(None)  # type: ignore[arg-type]  # raises inside sim/blame.py
    harness, case = crash_case(info.value)
    assert harness and case.startswith("AttributeError at sim/blame.py:_under_root:")
    v = crash_violation(2, "schedule", info.value)
    assert (v.invariant, v.case) == ("harness-crash", case)
    assert v.message.startswith("the harness raised AttributeError in schedule: ")


@pytest.mark.parametrize("make", [crash_violation, harness_crash])
def test_an_engine_fault_is_the_violation_it_names_wherever_it_is_raised(make):
    fault = _raised(EngineFault("engine-crash", "vLLM listed r0 twice", case="listed twice"))
    args = (5, "schedule", fault) if make is crash_violation else (5, fault)
    v = make(*args)
    assert (v.invariant, v.case, v.step) == ("engine-crash", "listed twice", 5)
    assert v.message.endswith("vLLM listed r0 twice")
