"""One request of a trace, as the simulator replays it.

A trace is JSONL, one request per line (see README "Trace format"). The prompt is given
either as `prompt_token_ids`, or Mooncake-style as `input_length` + `hash_ids` +
`hash_block_size` (expanded by `tokens.expand_hash_ids`). A request with a
`parent_request_id` is a later turn of a conversation: its full prompt is the parent's full
prompt + the parent's output tokens + its own prompt, and it arrives (closed loop) at
`max(arrival_time_s, parent finish + think_time_s)`. A request with a `session_id` and no
parent is a closed-loop user's next request: it waits the same way for the previous request
of its session, with an independent prompt (`sessions.py`). Validation: `validate.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE, expand_hash_ids


@dataclass(frozen=True, slots=True)
class TraceRequest:
    request_id: str
    arrival_time_s: float
    output_length: int  # max_tokens: tokens to generate, fewer where the run sets an EOS
    prompt_token_ids: tuple[int, ...] | None = None
    input_length: int | None = None
    hash_ids: tuple[int, ...] | None = None
    hash_block_size: int | None = None
    abort_time_s: float | None = None
    priority: int = 0
    session_id: str | None = None
    parent_request_id: str | None = None
    think_time_s: float = 0.0
    cache_salt: str | None = None  # vLLM's cache_salt: an extra key of every block hash

    @property
    def num_own_prompt_tokens(self) -> int:
        """Count of prompt tokens this line gives (without a parent's prompt and output)."""
        if self.prompt_token_ids is not None:
            return len(self.prompt_token_ids)
        assert self.input_length is not None
        return self.input_length

    def own_prompt_tokens(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> npt.NDArray[np.int64]:
        """The tokens this line gives, materialized (int64)."""
        if self.prompt_token_ids is not None:
            return np.asarray(self.prompt_token_ids, dtype=np.int64)
        assert self.hash_ids is not None and self.hash_block_size is not None
        assert self.input_length is not None
        return expand_hash_ids(self.hash_ids, self.hash_block_size, self.input_length, vocab_size)
