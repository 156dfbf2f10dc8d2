"""Deliberately broken adapters: the reference engine behind one mistake each, the kind an
adapter's author makes. Each declares the reference engine's capabilities, so what the
harness reports is the mistake, not a missing feature.

- miscounting:      a chunk's token_ids one short of num_scheduled_tokens
- unknown_id:       a scheduled request renamed to an id never added
- negative_count:   num_computed_tokens -1
- no_prefix_hit:    declares prefix caching but runs with it off (never a hit)
- swallows_finish:  never reports a finished request (a later turn waits forever)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from schedcheck.engines.capabilities import declare
from schedcheck.engines.protocol import EngineConfig, FinishedRequest, SchedulerOutput
from schedcheck.engines.reference.engine import CAPABILITIES, ReferenceEngine


class _Altered(ReferenceEngine):
    """The reference engine; `alter` changes its first scheduled request of each step."""

    name = "broken"

    def alter(self, output: SchedulerOutput) -> SchedulerOutput:
        return output

    def schedule(self) -> SchedulerOutput:
        output = super().schedule()
        return self.alter(output) if output.scheduled else output


def _first(output: SchedulerOutput, **changes: object) -> SchedulerOutput:
    first = dataclasses.replace(output.scheduled[0], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(output, scheduled=(first, *output.scheduled[1:]))


class _Miscounting(_Altered):
    def alter(self, output: SchedulerOutput) -> SchedulerOutput:
        first = output.scheduled[0]
        if first.num_scheduled_tokens < 2:
            return output
        return _first(output, token_ids=first.token_ids[:-1])


class _UnknownId(_Altered):
    def alter(self, output: SchedulerOutput) -> SchedulerOutput:
        return _first(output, request_id="ghost")


class _NegativeCount(_Altered):
    def alter(self, output: SchedulerOutput) -> SchedulerOutput:
        return _first(output, num_computed_tokens=-1)


class _SwallowsFinish(ReferenceEngine):
    name = "broken"

    def update_from_output(
        self, output: SchedulerOutput, sampled_token_ids: Mapping[str, int]
    ) -> list[FinishedRequest]:
        super().update_from_output(output, sampled_token_ids)
        return []


@declare(CAPABILITIES)
def make_miscounting(config: EngineConfig) -> ReferenceEngine:
    return _Miscounting(config)


@declare(CAPABILITIES)
def make_unknown_id(config: EngineConfig) -> ReferenceEngine:
    return _UnknownId(config)


@declare(CAPABILITIES)
def make_negative_count(config: EngineConfig) -> ReferenceEngine:
    return _NegativeCount(config)


@declare(CAPABILITIES)
def make_no_prefix_hit(config: EngineConfig) -> ReferenceEngine:
    return ReferenceEngine(dataclasses.replace(config, enable_prefix_caching=False))


@declare(CAPABILITIES)
def make_swallows_finish(config: EngineConfig) -> ReferenceEngine:
    return _SwallowsFinish(config)
