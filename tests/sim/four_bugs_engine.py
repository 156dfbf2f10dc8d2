"""The toy engine with four different bugs at once: two assertions at two places of its own
code, and two misaligned reads of different kinds. A campaign must report each of them as a
distinct finding with a bundle of its own; counted by invariant, the first crash would hide
the second and the first bad read the other.

    crash in schedule         a chunk that starts at token 7 of a longer prompt
    crash in update           a request's fifth output token
    another request's KV      a decode of a step's second request reads its first block
                              through the first request's first block
    its own stale KV          a later chunk of a prefill reads its first two blocks swapped
"""

from __future__ import annotations

import dataclasses

from toy_engine import ToyEngine

from schedcheck.engines.protocol import EngineConfig, ScheduledRequest, SchedulerOutput


class FourBugsEngine(ToyEngine):
    name = "four-bugs"

    def schedule(self) -> SchedulerOutput:
        output = super().schedule()
        for s in output.scheduled:  # bounded: this step's requests
            assert s.num_computed_tokens != 7 or s.num_prompt_tokens <= 7, "chunk at token 7"
        first = output.scheduled[0] if output.scheduled else None
        scheduled = tuple(self._misalign(s, first) for s in output.scheduled)
        return dataclasses.replace(output, scheduled=scheduled)

    def update_from_output(self, output, sampled):
        for r in self.running:  # bounded: the running requests
            assert len(r.outputs) != 4 or r.request.request_id not in sampled, "fifth output"
        return super().update_from_output(output, sampled)

    def _misalign(self, s: ScheduledRequest, first: ScheduledRequest | None) -> ScheduledRequest:
        bs = self.config.block_size
        table = list(s.block_table)
        prefill = s.num_computed_tokens < s.num_prompt_tokens
        if not prefill and first is not None and first is not s:
            if min(first.num_prompt_tokens, s.num_prompt_tokens) >= bs:
                table[0] = first.block_table[0]  # another request's KV
        elif prefill and s.num_computed_tokens > bs and len(table) >= 2:
            table[0], table[1] = table[1], table[0]  # its own KV of other positions
        return dataclasses.replace(s, block_table=tuple(table))


def make_engine(config: EngineConfig) -> FourBugsEngine:
    return FourBugsEngine(config)
