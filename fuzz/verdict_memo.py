"""A worker's memory of verdicts: a scenario judged once is not run again.

Hypothesis never runs one choice sequence twice, but different choices can draw the same
scenario: every round starts from its simplest example, the same scenario whatever the
round's seed, and a mutation that copies one span's choices over another often lands on
a scenario run already. Of 2,560 reference examples from seed 0, 358 (14 %) repeat a
scenario of the same campaign; an LRU of 32 scenarios catches 259 of them, one of 512 all
but one.

A run is a function of its scenario alone (a run's fingerprint is the same in every
process: the seeded generator of `Scenario.seed`, no global random state, no iteration
order of a set or dict), so a repeat's verdict is its first run's. The campaign's
examples, coverage, config tallies and findings are then those of a campaign that ran
every example, only sooner; `RoundProbe` counts the repeats beside the examples
(`repeats` in each progress message).

Keyed by the SHA-256 of the scenario's canonical JSON (`Scenario.dumps`, what a bundle
stores: equal text, equal scenario); a verdict is kept with its run's result (coverage,
violations, outputs), MEMO_MAX of them, the least recently judged forgotten first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from schedcheck.fuzz.scenario import Scenario
from schedcheck.fuzz.verdict import Verdict, judge

MEMO_MAX = 512  # scenarios remembered (a fuzz example's result: a few kB)


def scenario_key(scenario: Scenario) -> bytes:
    """The scenario's identity: the SHA-256 of its canonical JSON."""
    return hashlib.sha256(scenario.dumps().encode("utf-8")).digest()


class VerdictMemo:
    """`judge`, with the verdicts of the last MEMO_MAX distinct scenarios remembered."""

    def __init__(self, capacity: int = MEMO_MAX) -> None:
        assert capacity >= 1
        self.capacity = capacity
        self._verdicts: OrderedDict[bytes, Verdict] = OrderedDict()
        self.hits = 0  # verdicts answered from memory
        self.runs = 0  # verdicts judged by running

    def judge(self, scenario: Scenario) -> tuple[Verdict, bool]:
        """(the scenario's verdict, whether it was remembered rather than run)."""
        key = scenario_key(scenario)
        verdicts = self._verdicts
        known = verdicts.get(key)
        if known is not None:
            verdicts.move_to_end(key)
            self.hits += 1
            return known, True
        verdict = judge(scenario)
        self.runs += 1
        verdicts[key] = verdict
        if len(verdicts) > self.capacity:
            verdicts.popitem(last=False)
        assert len(verdicts) <= self.capacity
        return verdict, False
