"""The executor protocol: what runs a step's metadata and samples tokens.

Two implementations: the symbolic executor (`schedcheck.sim.symbolic`, the default, CPU,
a hash model with a shadow KV) and the tensor executor (`schedcheck.gpu.executor`, a real
model with a paged KV cache). The engine loop knows executors only through this protocol
and loads the tensor one lazily by name, so `sim/` never imports torch. What an executor
may offer beyond it (the violations its reads found, draft verification, block contents, a
shadow KV of its own) are narrower protocols in `schedcheck.sim.executors`, asked for once
when a run is set up.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from schedcheck.engines.metadata import RunnerMetadata


class Executor(Protocol):
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: npt.NDArray[np.int64],
        cache_salt: str | None = None,
    ) -> None:
        """Tell the executor a request's true prompt (its oracle for what the chunks hold);
        KV built under another `cache_salt` must never be read as this request's."""
        ...

    def execute(self, metadata: RunnerMetadata) -> dict[str, int]:
        """Run one step: write K/V through slot_mapping, attend, sample one token for each
        entry of `metadata.sampling_req_ids`. Returns request id -> sampled token id."""
        ...

    def finish_request(self, request_id: str) -> None:
        """The request is finished or aborted: forget it (its KV slots stay as written)."""
        ...
