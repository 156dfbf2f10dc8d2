"""One worker's share of a campaign's rounds, until a finding, the budget, or a stop.

    worker w of N runs rounds r = w, w + N, w + 2N, ... (seeds.py: a round's seed depends
    on (S, r) alone, so who runs it does not matter)
    round r:  @seed(round_seed(S, r)) @given(scenarios(spec)), max_examples per round
              ├─ an example fails -> the raw bundle is saved at once (kept on Ctrl-C)
              ├─ Hypothesis shrinks it, keeping to the first failure's kind (bounded
              │  by shrink_runs_max runs, deterministic, and shrink_budget_s as a
              │  safety net; at the bound, or once a stop is asked
              │  for, ShrinkDone ends Hypothesis and the simplest failure seen is kept)
              ├─ ddmin removes whole requests Hypothesis could not (same kind)
              └─ the shrunk bundle is saved and reported; the worker stops

A worker remembers the verdicts of the scenarios it judged last (verdict_memo.py): an
example that repeats one is not run again, and counts as an example and as a repeat.
Between rounds the worker checks the budget and whether the campaign asked it to stop.
Everything it tells the campaign goes through `report(message)`: plain dicts, so they
cross a process boundary.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

from schedcheck.fuzz.database import FailureDB
from schedcheck.fuzz.global_rngs import global_rngs_restored_per_round
from schedcheck.fuzz.scenario import Scenario, scenarios
from schedcheck.fuzz.seeds import round_seed
from schedcheck.fuzz.shrink import shrink_scenario
from schedcheck.fuzz.swarm import SwarmSpec
from schedcheck.fuzz.verdict import Verdict
from schedcheck.fuzz.verdict_memo import VerdictMemo
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.coverage import merge

ROUNDS_MAX = 1_000_000
Report = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class WorkerJob:
    spec: SwarmSpec
    campaign_seed: int
    worker_index: int
    budget_s: float
    started_at_s: float  # the campaign's start, time.time() (shared by every process)
    out_dir: str
    db_dir: str | None = None
    examples_per_round: int = 32
    examples_max: int | None = None  # stop after this many examples (tests; None: budget)
    shrink_runs_max: int = 200  # Hypothesis shrink runs: a deterministic bound
    shrink_budget_s: float = 60.0  # a wall-clock safety net on top (slow machines)
    rounds_stride: int = 1  # the campaign's workers: this one runs rounds w, w + stride, ...

    def __post_init__(self) -> None:
        assert 0 <= self.worker_index < self.rounds_stride, "worker w of rounds_stride"


class FoundBug(Exception):
    """Raised inside a Hypothesis example: the scenario is a finding."""

    def __init__(self, scenario_json: str) -> None:
        super().__init__(scenario_json)
        self.scenario_json = scenario_json


class ShrinkDone(BaseException):
    """Ends Hypothesis' shrinking at once (a BaseException: Hypothesis lets it through)."""


def shrink_key(scenario: Scenario) -> tuple[int, int, int]:
    """Smaller is simpler: fewer requests, fewer prompt tokens, shorter JSON."""
    num_tokens = sum(r.num_own_prompt_tokens for r in scenario.requests)
    return scenario.num_requests, num_tokens, len(scenario.dumps())


@dataclass
class RoundProbe:
    """Runs and judges each example of one round; remembers what failed."""

    job: WorkerJob
    round_index: int
    report: Report
    stopping: Callable[[], bool]
    memo: VerdictMemo  # the worker's, across rounds (a round's own where it has none)
    examples: int = 0
    shrink_runs: int = 0
    coverage: dict[str, int] = field(default_factory=dict)
    best: Scenario | None = None  # the simplest failing example so far
    kind: str = ""  # the first failure's kind (its invariant)
    signature: str = ""  # the first failure's signature: shrinking keeps to that bug
    detected_at_s: float | None = None
    shrink_deadline_s: float = 0.0
    clean_failure: dict[str, Any] | None = None
    configs: dict[str, dict[str, int]] = field(default_factory=dict)  # knob -> value -> count
    repeats: int = 0  # examples whose scenario the memo had judged already

    def __call__(self, scenario: Scenario) -> None:
        if self.detected_at_s is not None and self._shrink_over():
            raise ShrinkDone
        verdict, repeated = self.memo.judge(scenario)
        self._count(verdict, repeated)
        if self.detected_at_s is None:
            tally_config(self.configs, scenario)
        if verdict.clean_failed and self.clean_failure is None:
            self.clean_failure = self._save(scenario.with_mutant(None), "clean-failure", verdict)
        if verdict.failed and self.signature in ("", verdict.signature):  # not another bug
            if self.best is None or shrink_key(scenario) < shrink_key(self.best):
                self.best = scenario
            if self.detected_at_s is None:
                self._first_failure(scenario, verdict)
            raise FoundBug(scenario.dumps())

    def _count(self, verdict: Verdict, repeated: bool) -> None:
        if self.detected_at_s is None:
            self.examples += 1
            self.repeats += repeated
            self.coverage = merge(self.coverage, verdict.coverage)
        else:
            self.shrink_runs += 1

    def _shrink_over(self) -> bool:
        if self.shrink_runs >= self.job.shrink_runs_max or self.stopping():
            return True
        return time.monotonic() > self.shrink_deadline_s

    def _first_failure(self, scenario: Scenario, verdict: Verdict) -> None:
        self.detected_at_s = time.time() - self.job.started_at_s
        self.kind = verdict.kind
        self.signature = verdict.signature
        self.shrink_deadline_s = time.monotonic() + self.job.shrink_budget_s
        raw = self._save(scenario, "raw", verdict)
        self.report({"type": "raw", **raw, "examples": self.examples})

    def _save(self, scenario: Scenario, what: str, verdict: Verdict) -> dict[str, Any]:
        name = f"r{self.round_index}-{what}"
        bundle = save_scenario_bundle(Path(self.job.out_dir) / name, scenario)
        return {
            "worker": self.job.worker_index,
            "round": self.round_index,
            "kind": verdict.kind,
            "signature": verdict.signature,
            "headline": verdict.headline,
            "bundle": bundle,
            "requests": scenario.num_requests,
        }


CONFIG_KNOBS = (
    "block_manager",
    "block_size",
    "num_gpu_blocks",
    "max_num_batched_tokens",
    "max_num_seqs",
    "long_prefill_token_threshold",
    "num_lookahead_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "num_speculative_tokens",
    "kv_groups",
)


def tally_config(configs: dict[str, dict[str, int]], scenario: Scenario) -> None:
    """Count the swarm's draw of each knob (the campaign report's config distribution),
    and of each engine option in `extra` as `extra.KEY` (policy, async scheduling, vLLM's
    scheduler options), so a report shows which of them the swarm drew."""
    drawn = [(knob, str(getattr(scenario.config, knob))) for knob in CONFIG_KNOBS]
    drawn += [(f"extra.{key}", str(value)) for key, value in sorted(scenario.config.extra.items())]
    for knob, value in drawn:
        counts = configs.setdefault(knob, {})
        counts[value] = counts.get(value, 0) + 1


def save_scenario_bundle(path: Path, scenario: Scenario) -> str | None:
    """A bundle of the scenario's run (None if the harness itself cannot run it)."""
    try:
        result = scenario.run(record_schedule=True)
    except Exception:  # a harness crash: keep the scenario alone
        path.mkdir(parents=True, exist_ok=True)
        (path / "scenario.json").write_text(scenario.dumps() + "\n", encoding="utf-8")
        return None
    if path.exists():
        shutil.rmtree(path)
    bundle = save_bundle(path, result)
    (bundle / "scenario.json").write_text(scenario.dumps() + "\n", encoding="utf-8")
    return str(bundle)


def round_settings(job: WorkerJob, round_index: int) -> settings:
    """Every setting explicit, so no loaded profile (ci: derandomize) changes a campaign."""
    phases = [Phase.explicit, Phase.generate, Phase.shrink]
    database = None
    if job.db_dir is not None:
        database = FailureDB(Path(job.db_dir)).hypothesis_db(job.spec)
        if round_index == 0:
            phases.insert(1, Phase.reuse)
    return settings(
        max_examples=job.examples_per_round,
        database=database,
        phases=phases,
        derandomize=False,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        print_blob=False,
    )


def run_round(
    job: WorkerJob,
    round_index: int,
    report: Report,
    stopping: Callable[[], bool],
    memo: VerdictMemo | None = None,
) -> tuple[RoundProbe, Scenario | None]:
    """One round; returns the probe (counts) and the Hypothesis-shrunk finding, if any.
    `memo`: the worker's verdicts of earlier rounds (None: this round's alone)."""
    probe = RoundProbe(
        job, round_index, report, stopping, memo if memo is not None else VerdictMemo()
    )

    def fuzz_example(scenario: Scenario) -> None:
        probe(scenario)

    test = round_settings(job, round_index)(
        seed(round_seed(job.campaign_seed, round_index))(given(scenarios(job.spec))(fuzz_example))
    )
    try:
        with global_rngs_restored_per_round():
            test()
    except FoundBug as bug:  # Hypothesis finished shrinking: its minimal example
        return probe, Scenario.from_json_text(bug.scenario_json)
    except ShrinkDone:  # the shrink bound: the simplest failure seen
        return probe, probe.best
    return probe, None


def finish_finding(
    job: WorkerJob, probe: RoundProbe, hypothesis_shrunk: Scenario
) -> dict[str, Any]:
    """ddmin after Hypothesis, the shrunk bundle, and the finding's report. A memo of its
    own judges each candidate once: the shrunk scenario's verdict is the one ddmin's last
    accepted candidate (or the signature's run) already had."""
    started = time.monotonic()
    memo = VerdictMemo()
    signature = probe.signature or memo.judge(hypothesis_shrunk)[0].signature
    shrunk = shrink_scenario(hypothesis_shrunk, lambda s: _fails_as(memo, s, signature))
    verdict, _ = memo.judge(shrunk)
    assert verdict.failed, "a shrunk scenario still fails"
    name = f"r{probe.round_index}-shrunk"
    bundle = save_scenario_bundle(Path(job.out_dir) / name, shrunk)
    return {
        "type": "finding",
        "worker": job.worker_index,
        "round": probe.round_index,
        "round_seed": round_seed(job.campaign_seed, probe.round_index),
        "time_to_detect_s": round(probe.detected_at_s or 0.0, 3),
        "examples_in_round": probe.examples,
        "shrink_runs": probe.shrink_runs,
        "ddmin_s": round(time.monotonic() - started, 3),
        "hypothesis_requests": hypothesis_shrunk.num_requests,
        "shrunk_requests": shrunk.num_requests,
        "kind": verdict.kind,
        "signature": verdict.signature,
        "headline": verdict.headline,
        "bundle": bundle,
        "scenario": shrunk.to_json(),
    }


def _fails_as(memo: VerdictMemo, scenario: Scenario, signature: str) -> bool:
    verdict, _ = memo.judge(scenario)
    return verdict.failed and verdict.signature == signature


def run_worker(
    job: WorkerJob,
    report: Report,
    should_stop: Callable[[int], bool],
    stopping: Callable[[], bool],
) -> None:
    """This worker's rounds until a finding, the budget, `examples_max`, or `should_stop(round)`."""
    started = time.monotonic()
    examples = 0
    memo = VerdictMemo()  # across this worker's rounds: each starts from the same example
    rounds = range(job.worker_index, ROUNDS_MAX, job.rounds_stride)
    for round_index in rounds:  # bounded: budget and examples_max end it sooner
        if should_stop(round_index) or time.monotonic() - started >= job.budget_s:
            break
        if job.examples_max is not None and examples >= job.examples_max:
            break
        probe, found = run_round(job, round_index, report, stopping, memo)
        examples += probe.examples
        report(
            {
                "type": "progress",
                "worker": job.worker_index,
                "round": round_index,
                "examples": probe.examples,
                "repeats": probe.repeats,
                "coverage": probe.coverage,
                "configs": probe.configs,
            }
        )
        if probe.clean_failure is not None:
            report({"type": "clean-failure", **probe.clean_failure})
        if found is not None:
            report(finish_finding(job, probe, found))
            break
    report({"type": "done", "worker": job.worker_index, "examples": examples})
