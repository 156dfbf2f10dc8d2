"""A request's state inside the reference engine (vLLM v1's `Request`, names kept).

Token layout::

    _token_buffer (capacity num_prompt_tokens + max_tokens, int64; built at admission)
    | prompt_token_ids          | output_token_ids    | (room for the rest) |
    0                   num_prompt_tokens        num_tokens            capacity
    |<----------- num_computed_tokens ----------->|      KV written (or cache hit)

`num_tokens` counts the tokens the request knows (prompt + emitted outputs); the scheduler
makes `num_computed_tokens` catch up with it. After a recompute preemption
`num_computed_tokens` is 0 again and the re-prefill covers prompt + every output (vllm#28787).

A request waiting for its first admission keeps only its prompt, in the narrowest integer
dtype that holds every id exactly (uint16 for a 32,000-token vocabulary: a quarter of the
int64 array it was handed, which it does not keep), and no block hash: thousands of them wait
when a trace outruns the engine. With the EngineRequest's `prompt_source` (the simulator
builds the prompt again from the trace) it keeps no prompt at all while it waits: the source
is called once, when the buffer is built. The scheduler builds the int64 buffer
(`build_tokens`) when it first considers the request for admission; every accessor of the
tokens builds it too.

`block_hashes` are computed lazily, on first use (the first prefix-cache lookup, at that
admission), and extended as outputs fill blocks; they are hashed from a byte view of the
token buffer (no copy). They depend on the tokens and the cache salt alone, so when they are
computed changes no decision.
"""

from __future__ import annotations

import enum

import numpy as np

from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID, EngineRequest, TokenArray
from schedcheck.engines.reference.block_hash import BlockHasher, salt_extra_key


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # never ran, in the waiting queue
    RUNNING = "running"
    PREEMPTED = "preempted"  # back in the waiting queue after a recompute preemption
    FINISHED_LENGTH = "finished_length"
    FINISHED_STOPPED = "finished_stopped"  # sampled its EOS
    FINISHED_ABORTED = "finished_aborted"
    FINISHED_REJECTED = "finished_rejected"

    @property
    def is_finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset(
    (
        RequestStatus.FINISHED_LENGTH,
        RequestStatus.FINISHED_STOPPED,
        RequestStatus.FINISHED_ABORTED,
        RequestStatus.FINISHED_REJECTED,
    )
)


class Request:
    """Mutable request state; created from an `EngineRequest` by the scheduler."""

    __slots__ = (
        "_block_hashes",
        "_extra_key",
        "_hasher",
        "_prompt",
        "_prompt_source",
        "_token_buffer",
        "_token_bytes",
        "arrival_seq",
        "arrival_time_s",
        "cache_salt",
        "eos_token_id",
        "max_tokens",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_in_flight_tokens",
        "num_output_placeholders",
        "num_preemptions",
        "num_prompt_tokens",
        "num_stale_tokens",
        "num_tokens",
        "output_token_ids",
        "priority",
        "readonly_tokens",
        "request_id",
        "spec_token_ids",
        "status",
    )

    def __init__(self, engine_request: EngineRequest, hasher: BlockHasher, arrival_seq: int):
        prompt = engine_request.prompt_token_ids
        assert prompt.ndim == 1 and prompt.size >= 1
        self.request_id = engine_request.request_id
        self.num_prompt_tokens = int(prompt.size)
        self.max_tokens = engine_request.max_tokens
        self.eos_token_id = engine_request.eos_token_id  # None: EOS ignored
        self.priority = engine_request.priority
        self.arrival_time_s = engine_request.arrival_time_s
        self.arrival_seq = arrival_seq  # tie-breaker: the order add_request saw
        self.cache_salt = engine_request.cache_salt
        # Until build_tokens: the prompt alone, compact (or only its source); no buffer.
        self._prompt_source = engine_request.prompt_source
        self._prompt: np.ndarray | None = None
        if self._prompt_source is None:
            self._prompt = compact_tokens(prompt)
        self._token_buffer: TokenArray | None = None
        # Once built: the whole buffer, read-only; only [0, num_tokens) is meaningful. Slices
        # of it are what ScheduledRequest.token_ids carries (no copy; the tokens never change).
        self.readonly_tokens: TokenArray = _NOT_BUILT
        self._token_bytes = _NO_BYTES  # shared: a memoryview object is 184 bytes
        self.num_tokens = self.num_prompt_tokens
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1  # set at the first admission (vLLM's convention)
        self.num_preemptions = 0
        self.status = RequestStatus.WAITING
        # speculative decoding: the drafts proposed for the next step (vLLM's spec_token_ids)
        self.spec_token_ids: tuple[int, ...] = ()
        # async scheduling (async_scheduling.py): tokens scheduled in steps not yet applied,
        # and the placeholders (-1) among output_token_ids for samples still in flight
        self.num_in_flight_tokens = 0
        self.num_output_placeholders = 0
        self.num_stale_tokens = 0  # in-flight tokens of a step scheduled before a preemption
        self._hasher = hasher
        self._extra_key = salt_extra_key(self.cache_salt)
        self._block_hashes: list[bytes] = []

    # -- tokens ----------------------------------------------------------------------------

    def build_tokens(self) -> None:
        """Build the int64 token buffer (prompt + room for max_tokens outputs) from the
        compact prompt, once; the scheduler calls it at the request's first admission."""
        if self._token_buffer is not None:
            return
        prompt = self._prompt
        if prompt is None:
            assert self._prompt_source is not None
            prompt = self._prompt_source()
            assert prompt.shape == (self.num_prompt_tokens,), "the source builds another prompt"
        buffer = np.empty(self.num_prompt_tokens + self.max_tokens, dtype=np.int64)
        buffer[: self.num_prompt_tokens] = prompt
        readonly = buffer.view()
        readonly.flags.writeable = False
        self._token_buffer, self.readonly_tokens = buffer, readonly
        self._prompt = self._prompt_source = None
        self._token_bytes = memoryview(buffer.data).cast("B")

    @property
    def tokens_built(self) -> bool:
        return self._token_buffer is not None

    @property
    def prompt_token_ids(self) -> TokenArray:
        self.build_tokens()
        return self.readonly_tokens[: self.num_prompt_tokens]

    @property
    def all_token_ids(self) -> TokenArray:
        """Read-only view of tokens [0, num_tokens)."""
        self.build_tokens()
        return self.readonly_tokens[: self.num_tokens]

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    def token_view(self, start: int, stop: int) -> TokenArray:
        """Read-only int64 view of tokens [start, stop); valid for the request's lifetime."""
        assert 0 <= start <= stop <= self.num_tokens
        self.build_tokens()
        return self.readonly_tokens[start:stop]

    def append_output_token(self, token_id: int) -> None:
        num_tokens = self.num_tokens
        assert num_tokens - self.num_prompt_tokens < self.max_tokens, "max_tokens emitted"
        buffer = self._token_buffer
        if buffer is None:  # outputs come after an admission; a test may skip it
            self.build_tokens()
            buffer = self._token_buffer
            assert buffer is not None
        buffer[num_tokens] = token_id
        self.output_token_ids.append(token_id)
        self.num_tokens = num_tokens + 1

    def append_outputs(self, tokens: tuple[int, ...]) -> None:
        """A step's tokens (accepted drafts, then the bonus token) up to max_tokens and the
        EOS; the rest is dropped, as vLLM drops the drafts accepted past a stop."""
        tokens = tokens[: self.max_tokens - self.num_output_tokens]
        if self.eos_token_id in tokens:
            tokens = tokens[: tokens.index(self.eos_token_id) + 1]
        for token in tokens:  # bounded: the step's drafts + 1
            self.append_output_token(int(token))

    def stop_reason(self) -> str | None:
        """Why the request stops: at its EOS ("stop", checked first, as vLLM does), at
        max_tokens ("length"), or not (None). Outputs past the EOS (async: a placeholder of
        a step in flight) are dropped: the request returns what ends at its EOS."""
        outputs = self.output_token_ids
        eos = self.eos_token_id
        if eos is not None and eos in outputs:
            past = outputs.index(eos) + 1
            self.num_output_placeholders -= outputs[past:].count(PLACEHOLDER_TOKEN_ID)
            del outputs[past:]
            self.num_tokens = self.num_prompt_tokens + len(outputs)
            return "stop"
        return "length" if self.num_output_tokens >= self.max_tokens else None

    def append_placeholder(self) -> None:
        """Async scheduling: a sample still in flight holds its position (token -1)."""
        self.append_output_token(PLACEHOLDER_TOKEN_ID)
        self.num_output_placeholders += 1

    def fill_placeholder(self, position: int, token_id: int) -> None:
        """The sampled token for the placeholder at `position` (its step was applied); a
        block hash computed over the placeholder is dropped, to be computed again."""
        assert self.num_prompt_tokens <= position < self.num_tokens
        assert self._token_buffer is not None, "outputs imply a built buffer"
        assert self._token_buffer[position] == PLACEHOLDER_TOKEN_ID, "not a placeholder"
        self._token_buffer[position] = token_id
        self.output_token_ids[position - self.num_prompt_tokens] = token_id
        self.num_output_placeholders -= 1
        del self._block_hashes[position // self._hasher.block_size :]

    # -- block hashes ----------------------------------------------------------------------

    @property
    def block_hashes(self) -> list[bytes]:
        """Chained hashes of the full blocks of tokens [0, num_tokens), computed lazily."""
        hashes = self._block_hashes
        if len(hashes) < self.num_tokens // self._hasher.block_size:
            self.build_tokens()
            self._hasher.extend(hashes, self._token_bytes, self.num_tokens, self._extra_key)
        return hashes

    @property
    def salt_key(self) -> bytes:
        """The extra key bytes (empty without a cache salt); the radix tree's namespace."""
        return self._extra_key

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.value}, "
            f"num_computed_tokens={self.num_computed_tokens}, num_tokens={self.num_tokens})"
        )


_NOT_BUILT: TokenArray = np.empty(0, dtype=np.int64)
_NOT_BUILT.flags.writeable = False
_NO_BYTES = memoryview(b"")
_NARROW_DTYPES = (np.dtype(np.uint16), np.dtype(np.int32))


def compact_tokens(prompt: np.ndarray) -> np.ndarray:
    """The prompt in the narrowest of uint16 / int32 that holds every id exactly (a copy:
    the caller's array is not kept); otherwise the array itself if read-only (a view, no
    copy), else a copy (the caller may still change it)."""
    low, high = int(prompt.min()), int(prompt.max())
    for dtype in _NARROW_DTYPES:  # bounded: two
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return prompt.astype(dtype)
    if prompt.dtype == np.int64 and not prompt.flags.writeable:
        return prompt
    return np.array(prompt, dtype=np.int64)
