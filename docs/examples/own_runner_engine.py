"""An engine with a model runner of its own, handing the runner's metadata to schedcheck.

The decode-first engine (decode_first_engine.py) plus a small model runner: the code that
turns each SchedulerOutput into the indices an attention kernel is given (positions,
slot mapping, query start locations, sequence lengths, block tables, logits indices), as
a real engine's runner does (vLLM's `_prepare_inputs`, nano-vllm's `prepare_prefill`).

By default schedcheck derives those indices itself from the SchedulerOutput
(`engines/metadata.build_metadata`), so a bug *in the runner* is invisible: the scheduler's
decision is right, the kernel is handed something else. An engine shows its runner to the
checks with one optional method, `runner_metadata(step) -> RunnerMetadata | None`
(`schedcheck.engines.runner_metadata.RunnerMetadataEngine`): the shadow KV then checks
the runner's indices, and each field where they differ from the derivation is reported as
`shadow-kv.runner-metadata-disagrees`.

    PYTHONPATH=docs/examples schedcheck replay --engine own_runner_engine:make_engine \\
        --no-prefix-caching

`KEY_LENGTH_BUG` re-creates the bug nano-vllm's authors fixed in its runner: the
attention's key length taken as the request's whole sequence (prompt and outputs known so
far) instead of the tokens computed through this chunk. In a chunked prefill the kernel
then reads keys no step has written. tests/docs/test_own_runner_example.py plants it: the
shadow KV finds it through `runner_metadata`, and the same engine without that method
(the derivation) passes clean.
"""

from __future__ import annotations

import numpy as np
from decode_first_engine import DecodeFirstEngine, cdiv
from decode_first_engine import make_engine as make_decode_first

from schedcheck.engines.capabilities import capabilities_of, declare
from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.engines.protocol import EngineConfig, SchedulerOutput

KEY_LENGTH_BUG = False  # tests switch it on: seq_lens = the whole known sequence


class ModelRunner:
    """What a model runner computes from one SchedulerOutput, before its kernels run."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size

    def prepare(self, output: SchedulerOutput) -> RunnerMetadata:
        bs = self.block_size
        positions, slots, input_ids, seq_lens, starts = [], [], [], [], [0]
        tables, logits_indices, sampling = [], [], []
        for r in output.scheduled:  # bounded: the batch
            first, end = r.num_computed_tokens, r.num_computed_tokens + r.num_scheduled_tokens
            table = tuple(r.block_table[: cdiv(end, bs)])
            for p in range(first, end):  # bounded: the chunk
                positions.append(p)
                slots.append(table[p // bs] * bs + p % bs)
            input_ids.extend(int(t) for t in r.token_ids)
            seq_lens.append(r.num_tokens if KEY_LENGTH_BUG else end)
            starts.append(starts[-1] + r.num_scheduled_tokens)
            tables.append(tuple(r.block_table[: cdiv(seq_lens[-1], bs)]))
            if end == r.num_tokens:  # the chunk reaches the last known token: it samples
                logits_indices.append(starts[-1] - 1)
                sampling.append(r.request_id)

        def ints(values: list[int]) -> np.ndarray:
            return np.asarray(values, dtype=np.int64)

        qsl, lens = ints(starts), ints(seq_lens)
        return RunnerMetadata(
            output=output,
            block_size=bs,
            req_ids=tuple(r.request_id for r in output.scheduled),
            num_computed_tokens=lens - np.diff(qsl),
            query_start_loc=qsl,
            seq_lens=lens,
            positions=ints(positions),
            input_ids=ints(input_ids),
            slot_mapping=ints(slots),
            logits_indices=ints(logits_indices),
            sampling_req_ids=tuple(sampling),
            block_tables=tuple(tables),
        )


class OwnRunnerEngine(DecodeFirstEngine):
    """The decode-first engine whose runner's metadata is handed to the checks."""

    name = "own-runner"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.runner = ModelRunner(config.block_size)
        self._prepared: dict[int, RunnerMetadata] = {}

    def schedule(self) -> SchedulerOutput:
        output = super().schedule()
        if output.scheduled:
            self._prepared[output.step] = self.runner.prepare(output)
        return output

    def runner_metadata(self, step: int) -> RunnerMetadata | None:
        """The metadata this engine's runner gave its kernels in `step` (optional method)."""
        return self._prepared.pop(step, None)


@declare(capabilities_of(make_decode_first))
def make_engine(config: EngineConfig) -> OwnRunnerEngine:
    return OwnRunnerEngine(config)
