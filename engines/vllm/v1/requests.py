"""vLLM's `Request` as its frontend builds it for the adapter (AsyncLLM's input processor,
then EngineCore's `Request.from_engine_core_request`): the sampling parameters with the
model's EOS, an arrival stamp, the block hasher every Request gets, and, where the
simulator drives streaming-input sessions (sessions.py), `resumable`.

Three kinds of Request reach the scheduler's `add_request`::

    a new request        its whole prompt, under its own id
    a session's chunk    the later turn's tokens past what the session keeps, under the
                         session's id (its first request's): vLLM continues the session,
                         or queues the chunk while the session's turn runs
    the stream's end     a request that is not resumable, under the session's id: vLLM
                         aborts the session and frees its blocks
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schedcheck.engines.protocol import EngineRequest
from schedcheck.engines.vllm.v1 import eras

from vllm.sampling_params import SamplingParams  # isort: skip
from vllm.v1.request import Request  # isort: skip

# vLLM stamps Request.arrival_time with time.time(), so two requests never tie; the
# simulator adds a tick's arrivals at one time. Each stamp is at least this much later than
# the last (ties would order the priority policy's victims by request id: a false liveness
# finding of the first priority campaign, tests/vllm/test_vllm_v1_options.py)
ARRIVAL_TIME_TICK_S = 1e-6


class RequestBuilder:
    """Builds the adapter's vLLM Requests, stamping each arrival after the last."""

    def __init__(self, block_hasher: Callable[[Any], list[Any]] | None, resumable: bool) -> None:
        self.block_hasher = block_hasher
        self.resumable = resumable  # every request is a streaming-input session
        self._last_arrival_time_s = -ARRIVAL_TIME_TICK_S

    def build(
        self, request: EngineRequest, token_ids: list[int], session_id: str | None = None
    ) -> Request:
        """vLLM's Request for `request`'s tokens `token_ids` (a session's chunk: named by
        the session `session_id`)."""
        kwargs = dict(
            request_id=session_id or request.request_id,
            prompt_token_ids=token_ids,
            sampling_params=sampling_params(request),
            eos_token_id=request.eos_token_id,
            pooling_params=None,
            arrival_time=self._arrival_time(request.arrival_time_s),
            priority=request.priority,
            cache_salt=request.cache_salt,
            block_hasher=self.block_hasher,
        )
        if self.resumable:
            kwargs["resumable"] = True
        return Request(**eras.request_kwargs(Request, kwargs))

    @staticmethod
    def end_of_stream(session_id: str) -> Request:
        """The request that ends session `session_id`'s input stream, as AsyncLLM sends it."""
        params = SamplingParams(max_tokens=1, ignore_eos=True)
        kwargs = dict(request_id=session_id, prompt_token_ids=[0], sampling_params=params,
                      pooling_params=None, resumable=False)  # fmt: skip
        return Request(**eras.request_kwargs(Request, kwargs))

    def _arrival_time(self, arrival_time_s: float) -> float:
        """A stamp after every earlier one, as time.time() gives vLLM's frontend."""
        stamp = max(arrival_time_s, self._last_arrival_time_s + ARRIVAL_TIME_TICK_S)
        self._last_arrival_time_s = stamp
        return stamp


def sampling_params(request: EngineRequest) -> SamplingParams:
    """max_tokens, and the model's EOS as vLLM's frontend sets it (from the model's
    generation config); ignore_eos where the simulator's model has none."""
    eos_token_id = request.eos_token_id
    params = SamplingParams(max_tokens=request.max_tokens, ignore_eos=eos_token_id is None)
    if eos_token_id is not None:
        params.update_from_generation_config({}, eos_token_id)
    return params
