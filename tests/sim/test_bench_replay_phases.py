"""bench/replay_phases.py's split by kind of step: a step runs from one schedule() call to
the next and goes to the kind its own schedule() returned; the kinds' phases add up to
the whole run's."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from bench_loader import imported_bench


@pytest.fixture
def bench(monkeypatch):
    yield from imported_bench(monkeypatch, "replay_phases")


def _output(*num_scheduled_tokens: int) -> SimpleNamespace:
    return SimpleNamespace(
        scheduled=[SimpleNamespace(num_scheduled_tokens=n) for n in num_scheduled_tokens]
    )


def test_a_step_is_decode_only_where_every_request_runs_one_token(bench):
    assert bench.step_kind(_output(1, 1, 1)) == "decode"
    assert bench.step_kind(_output(1, 16, 1)) == "prefill"
    assert bench.step_kind(_output(512)) == "prefill"
    assert bench.step_kind(_output()) == "decode"  # a step that schedules none


def test_each_step_goes_to_the_kind_its_schedule_returned(bench):
    """A fake clock: each step's schedule() and the phase after it cost exact seconds."""
    now = [0.0]
    phases = bench.Phases()
    phases.cpu_s.update(schedule=0.0, execute=0.0)  # credited by hand: the fake clock's
    kinds = bench.StepKinds(phases, clock=lambda: now[0])
    outputs = iter([_output(1, 1), _output(1, 40), _output(1)])

    def schedule():
        now[0] += 1.0
        phases.cpu_s["schedule"] += 1.0
        return next(outputs)

    schedule_stepped = kinds.wrap_schedule(schedule)
    for execute_s in (2.0, 10.0, 4.0):  # decode, prefill, decode
        schedule_stepped()
        now[0] += execute_s
        phases.cpu_s["execute"] += execute_s
        now[0] += 0.5  # the rest of the step: no phase
    kinds.close()
    kinds.close()  # a second close has no open step

    assert kinds.num_steps == {"decode": 2, "prefill": 1}
    assert kinds.cpu_s["decode"] == pytest.approx({"schedule": 2.0, "execute": 6.0, "total": 9.0})
    assert kinds.cpu_s["prefill"] == pytest.approx(
        {"schedule": 1.0, "execute": 10.0, "total": 11.5}
    )
    per_step = kinds.us_per_step()
    assert per_step["decode"] == pytest.approx(
        {"schedule": 1e6, "execute": 3e6, bench.REST: 0.5e6, "total": 4.5e6, "steps": 2}
    )
    assert per_step["prefill"]["steps"] == 1
    assert per_step["prefill"][bench.REST] == pytest.approx(0.5e6)


def test_the_kinds_add_up_to_the_whole_run(bench):
    args = argparse.Namespace(
        trace=str(bench.TRACE), max_requests=3, block_size=16, bare=False, by_kind=True
    )
    report = bench.measure(args)
    assert "us_per_step_by_kind" not in bench.measure(
        argparse.Namespace(**{**vars(args), "by_kind": False})
    )
    by_kind = report["us_per_step_by_kind"]
    steps = {kind: by_kind[kind]["steps"] for kind in bench.STEP_KINDS}
    assert steps["decode"] + steps["prefill"] == report["steps"]
    assert steps["decode"] > 0 and steps["prefill"] > 0
    for name, us in report["us_per_step"].items():
        if name in ("total", bench.REST):
            continue
        split_us = sum(by_kind[k].get(name, 0.0) * steps[k] for k in bench.STEP_KINDS)
        if name == "engine add_request()":  # the first arrivals come before any step
            assert split_us <= us * report["steps"] + 1e-6
            continue
        assert split_us == pytest.approx(us * report["steps"], rel=1e-9, abs=1e-6)
    whole_s = sum(by_kind[k]["total"] * steps[k] for k in bench.STEP_KINDS) / 1e6
    assert 0 < whole_s <= report["cpu_time_s"]


def test_the_parts_inside_are_timed_apart_and_put_back(bench):
    """--inside: every part is timed (the parts that run on this window cost time), none is
    in the phases' sum, and every patched method is the original again afterwards."""
    import importlib

    def owners():
        for module_name, class_name, attr, _ in bench.INSIDE_PARTS:
            owner = importlib.import_module(f"schedcheck.{module_name}")
            yield getattr(owner, class_name) if class_name else owner, attr

    before = [getattr(owner, attr) for owner, attr in owners()]
    args = argparse.Namespace(
        trace=str(bench.TRACE), max_requests=3, block_size=16, bare=False, by_kind=False
    )
    report = bench.measure(argparse.Namespace(**vars(args), inside=True))
    assert [getattr(owner, attr) for owner, attr in owners()] == before
    per_step = report["us_per_step"]
    names = list(per_step)
    inside = [name for _, _, _, name in bench.INSIDE_PARTS]
    assert names[-len(inside) :] == inside  # after the total, in the parts' order
    phases = {n: us for n, us in per_step.items() if n not in inside and n != "total"}
    assert sum(phases.values()) == pytest.approx(per_step["total"])
    assert per_step["pool: the tables' diff"] > 0 and per_step["shadow: the common step"] > 0
    assert not set(inside) & set(bench.measure(args)["us_per_step"])
