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

Keyed by the scenario's own equality (the dataclass's `==`, field by field), as a tuple
of its fields with the engine options' `extra` as sorted items (a dict is not hashable):
about 10 us a scenario, where the SHA-256 of its canonical JSON (`Scenario.dumps`) took
70-180 us, as much as the repeats saved. A verdict is kept with its run's result
(coverage, violations, outputs), MEMO_MAX of them, the least recently judged forgotten
first. Nothing is decided by a hash's value: a lookup finds the equal scenario or none.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Hashable

from schedcheck.engines.protocol import EngineConfig
from schedcheck.fuzz.scenario import Scenario
from schedcheck.fuzz.verdict import Verdict, judge

MEMO_MAX = 512  # scenarios remembered (a fuzz example's result: a few kB)
# every field, so a field added later is in the key too ("config" and "extra" converted)
_SCENARIO_FIELDS = tuple(f.name for f in dataclasses.fields(Scenario) if f.name != "config")
_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(EngineConfig) if f.name != "extra")


def scenario_key(scenario: Scenario) -> Hashable:
    """The scenario's fields as a tuple: equal keys iff equal scenarios (`==`)."""
    config = scenario.config
    config_key = (
        *map(config.__getattribute__, _CONFIG_FIELDS),
        tuple(sorted(config.extra.items())),
    )
    return (config_key, *map(scenario.__getattribute__, _SCENARIO_FIELDS))


class VerdictMemo:
    """`judge`, with the verdicts of the last MEMO_MAX distinct scenarios remembered."""

    def __init__(self, capacity: int = MEMO_MAX) -> None:
        assert capacity >= 1
        self.capacity = capacity
        self._verdicts: OrderedDict[Hashable, Verdict] = OrderedDict()
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
