"""A campaign on a Ray cluster: every round a Ray task, the least failing round wins.

    driver (this process)                          Ray tasks (any node of the cluster)
    replay the failure database, as locally
    submit rounds 0 .. workers-1  ───────────────► run_round_task(job, r)  (round_task.py)
    a round returns: its messages and bundles ◄─── shrunk there if it found something
      └─ bundles written under --out, messages handled as a local worker's
    keep `workers` rounds in flight while nothing is found and budget is left
    a finding in round r: rounds after r are cancelled, rounds before r awaited (a
      lower round's finding wins), so a seed gives the finding of a one-process campaign
    a node lost: Ray runs its tasks again elsewhere (max_retries), nothing is lost

Ray itself is reached through fuzz/ray_cluster.py (the one module that imports it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schedcheck.fuzz.ray_cluster import connect, remote
from schedcheck.fuzz.round_task import run_round_task, unpack_bundles
from schedcheck.fuzz.worker import WorkerJob

WAIT_S = 0.5  # how long the driver waits for a round before it checks the clock

Handle = Callable[[dict[str, Any]], None]


class RoundsInFlight:
    """The driver's state: which round each task runs, and which rounds may still run."""

    def __init__(self, ray: Any, job: WorkerJob, slots: int) -> None:
        assert slots >= 1
        self.ray = ray
        self.job = job
        self.slots = slots
        self.task = remote(ray, run_round_task)
        self.round_of: dict[Any, int] = {}  # ObjectRef -> round index
        self.next_round = 0
        self.stop_round: int | None = None  # the least round with a finding

    def fill(self, may_start: bool) -> None:
        """Submit rounds until `slots` are in flight (none once a finding or `may_start` ends)."""
        while may_start and self.stop_round is None and len(self.round_of) < self.slots:
            slot_job = _as_slot(self.job, self.next_round % self.slots, self.slots)
            self.round_of[self.task.remote(slot_job, self.next_round)] = self.next_round
            self.next_round += 1

    def finished(self) -> list[tuple[int, dict[str, Any]]]:
        """(round, result) of the tasks done within WAIT_S (a lost node's are retried)."""
        if not self.round_of:
            return []
        refs = sorted(self.round_of, key=self.round_of.__getitem__)
        done, _ = self.ray.wait(refs, num_returns=1, timeout=WAIT_S)
        return [(self.round_of.pop(ref), self.ray.get(ref)) for ref in done]

    def found_in(self, round_index: int) -> None:
        """A finding in `round_index`: later rounds cannot win, so they stop."""
        if self.stop_round is None or round_index < self.stop_round:
            self.stop_round = round_index
        for ref, other in sorted(self.round_of.items(), key=lambda item: item[1]):
            if other > self.stop_round:
                self.ray.cancel(ref, force=True)
                del self.round_of[ref]

    def cancel_all(self) -> None:
        for ref in list(self.round_of):
            self.ray.cancel(ref, force=True)
        self.round_of.clear()


def _as_slot(job: WorkerJob, worker_index: int, slots: int) -> WorkerJob:
    return dataclasses.replace(job, worker_index=worker_index, rounds_stride=slots)


def run_rounds_on_ray(
    job: WorkerJob,
    address: str | None,
    slots: int,
    deadline_s: float,
    hard_deadline_s: float,
    handle: Handle,
    examples_max: int | None = None,
) -> None:
    """Rounds of `job`'s campaign as Ray tasks, `slots` in flight, until a finding is
    settled or the budget ends; every message reaches `handle` as a local worker's would."""
    flight = RoundsInFlight(connect(address), job, slots)
    out_dir = Path(job.out_dir)
    examples = 0
    try:
        while time.time() < hard_deadline_s:  # bounded by the hard deadline
            may_start = time.time() < deadline_s and (
                examples_max is None or examples < examples_max
            )
            flight.fill(may_start)
            if not flight.round_of:
                break
            for round_index, result in flight.finished():
                for message in unpack_bundles(result, out_dir):
                    examples += int(message.get("examples", 0)) * (message["type"] == "progress")
                    handle({**message, "in_flight": len(flight.round_of)})
                    if message["type"] == "finding":
                        flight.found_in(round_index)
    finally:
        flight.cancel_all()
