"""Is a scenario a finding? A violation, a liveness failure or a crash of the run.

With a mutant, a finding must be the mutant's: the scenario fails with the mutant and runs
clean without it. A scenario that fails both ways is a bug of the clean engine; it is kept
(`clean_failed`) and reported, but it does not count as finding the mutant, and the
shrinker never walks from the mutant's bug into it.

An exception from the engine under test is already an `engine-crash` violation, and one
from the harness while it runs (e.g. runner metadata that cannot be built) a
`harness-crash` violation with its traceback (the loop catches both, so the run has a
bundle); malformed engine output is a `protocol.*` violation before the harness reads it.
An exception before the run starts (building the engine or the executor) is still a
finding of kind `harness-crash` here, without a run.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedcheck.fuzz.scenario import Scenario
from schedcheck.sim.blame import harness_crash
from schedcheck.sim.loop import HARNESS_CRASH, RunResult

LIVENESS = "liveness"


@dataclass(frozen=True, slots=True)
class Verdict:
    failed: bool  # a finding for this campaign
    kind: str  # "" (clean), the first violation's invariant, "liveness" or "harness-crash"
    headline: str
    clean_failed: bool = False  # a mutant's scenario that fails without the mutant too
    result: RunResult | None = None  # None after a harness crash
    signature: str = ""  # the bug (Violation.signature): what a campaign counts and shrinks to

    @property
    def coverage(self) -> dict[str, int]:
        return dict(self.result.coverage) if self.result is not None else {}


def outcome(scenario: Scenario) -> Verdict:
    """Run once; `failed` iff the run violates, gets stuck, or the harness crashes."""
    try:
        result = scenario.run()
    except Exception as exc:  # the engine broke the harness: a finding
        headline = f"{HARNESS_CRASH}: {type(exc).__name__}: {exc}"
        return Verdict(True, HARNESS_CRASH, headline, signature=harness_crash(0, exc).signature)
    if result.violations:
        first = result.violations[0]
        return Verdict(
            True, first.invariant, first.headline(), result=result, signature=first.signature
        )
    if result.stuck and LIVENESS not in scenario.ignore:  # --ignore liveness: a known stall
        rid, why = next(iter(sorted(result.stuck.items())))
        headline = f"{LIVENESS}: {rid}: {why}"
        return Verdict(True, LIVENESS, headline, result=result, signature=LIVENESS)
    return Verdict(False, "", "", result=result)


def judge(scenario: Scenario) -> Verdict:
    """The campaign's verdict: `outcome`, and with a mutant, clean without it."""
    verdict = outcome(scenario)
    if not verdict.failed or scenario.config.mutant is None:
        return verdict
    clean = outcome(scenario.with_mutant(None))
    if not clean.failed:
        return verdict
    return Verdict(False, verdict.kind, verdict.headline, True, verdict.result, verdict.signature)
