"""A run over simulated time, from its bundle: throughput, queue, batch, KV usage, hit ratio.

A bundle records no clock, so the clock is rebuilt the way the loop ran it: steps run back
to back, each taking the cost model's step time (config.json "cost"); when no request was
live before a step, the engine was idle and the step starts at the earliest arrival
(trace arrival_time_s) of the requests it admits (exact for open-loop traces; a later turn
waits for its parent, so there the gap may be shorter than the run's)::

    step  start_s  time_us  running  waiting  sampled  hit_ratio

hit_ratio: prefix-hit tokens / tokens known, summed over every (re)admission so far.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

from schedcheck.report.replay import StepView
from schedcheck.sim.cost_model import StepCostModel


@dataclass
class RunSeries:
    cost: StepCostModel
    arrival_s: Mapping[str, float]
    start_s: list[float] = field(default_factory=list)
    step_time_s: list[float] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    hit_ratio: list[float] = field(default_factory=list)
    admitted: set[str] = field(default_factory=set)  # ever scheduled
    live: set[str] = field(default_factory=set)  # holding blocks now
    num_prompt_tokens: int = 0  # tokens known at each (re)admission, summed
    num_hit_tokens: int = 0
    clock_s: float = 0.0

    def __post_init__(self) -> None:
        self.arrivals_sorted = sorted(self.arrival_s.values())

    def observe(self, view: StepView) -> None:
        out = view.output
        self.live.difference_update(view.left)
        new = [r for r in out.scheduled if r.request_id not in self.admitted]
        if not view.tables.keys() - {r.request_id for r in new} and new:  # engine was idle
            first = min(self.arrival_s.get(r.request_id, self.clock_s) for r in new)
            self.clock_s = max(self.clock_s, first)
        for r in out.scheduled:
            if r.request_id not in self.live:  # (re)admitted: its hit counts
                self.live.add(r.request_id)
                self.num_prompt_tokens += r.num_tokens
                self.num_hit_tokens += r.num_cached_tokens
        self.admitted.update(r.request_id for r in new)
        step_s = self.cost.step_time_us(view.meta) * 1e-6
        self.start_s.append(self.clock_s)
        self.step_time_s.append(step_s)
        self.running.append(len(view.tables))
        arrived = bisect.bisect_right(self.arrivals_sorted, self.clock_s)
        self.waiting.append(max(0, arrived - len(self.admitted)))
        self.sampled.append(int(view.meta.logits_indices.size))
        total = self.num_prompt_tokens
        self.hit_ratio.append(self.num_hit_tokens / total if total else 0.0)
        self.clock_s += step_s
