"""The request ledger: what the loop itself knows of each live request.

The engine under test keeps its own books, and the checks must not take its word for them.
The loop keeps, per request from its arrival until it finishes, is aborted or rejected:

    live        the request as it was added (max_tokens, cache salt; its prompt read only
                when asked for: LiveRequest)
    num_tokens  tokens the request knows: prompt + tokens sampled for it (the accounting's
                `num_tokens`: a step may schedule no token the request does not know)
    sampled     the tokens sampled for it so far (a finished request's outputs are checked
                against them; an unfinished one's are reported as they stand)
    history     its last `context_steps` steps, quoted in its violations

A request enters when the arrivals release it (`admit`) and leaves once (`retire`: its
outputs and how it ended go to the run's result); every part that keeps something per
request (the executor, the checks, the drafter, coverage) registers in `forget` and is told
then, in the order registered, and the arrivals last (`on_retired`: a later turn of the
conversation may now be released).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from schedcheck.engines.protocol import EngineRequest, ScheduledRequest, SchedulerOutput
from schedcheck.invariants.outputs import until_eos
from schedcheck.sim.arrivals import Arrivals, Chunk, Release
from schedcheck.sim.result import RunResult
from schedcheck.traces.schema import TraceRequest

StepLine = tuple[int, ScheduledRequest]  # (step, the request's share of it): immutable
PromptOf = Callable[[TraceRequest], np.ndarray]  # a released request's full prompt, again


class LiveRequest:
    """A live request as the loop keeps it: the EngineRequest's fields, its prompt read
    only when asked for. A request waiting in the engine's queue (thousands of them when a
    trace outruns the engine) then costs no copy of its prompt here: with `prompt_of` the
    prompt is built again from the trace (the same tokens: `Arrivals.full_prompt`) at the
    first read and kept until the request leaves; without it, or for a later turn of a
    conversation, the array is kept."""

    __slots__ = (
        "_prompt",
        "_prompt_of",
        "_trace_request",
        "arrival_time_s",
        "cache_salt",
        "max_tokens",
        "num_prompt_tokens",
        "priority",
        "request_id",
    )

    def __init__(
        self,
        trace_request: TraceRequest,
        prompt_token_ids: np.ndarray,
        arrival_time_s: float,
        prompt_of: PromptOf | None,
    ) -> None:
        """The EngineRequest's fields, as `Ledger.admit` hands them to the engine."""
        self.request_id, self.max_tokens = trace_request.request_id, trace_request.output_length
        self.arrival_time_s, self.priority = arrival_time_s, trace_request.priority
        self.cache_salt, self.num_prompt_tokens = trace_request.cache_salt, prompt_token_ids.size
        if trace_request.parent_request_id is not None:  # its prompt holds a parent's
            prompt_of = None  # outputs, and a parent read later in a trace would change it
        self._trace_request, self._prompt_of = trace_request, prompt_of
        self._prompt = None if prompt_of is not None else prompt_token_ids

    def prompt(self) -> np.ndarray:
        """The prompt, as a call (the EngineRequest's prompt_source): built at the first
        read, then kept until the request leaves."""
        return self.prompt_token_ids

    @property
    def prompt_token_ids(self) -> np.ndarray:
        if self._prompt is None:
            assert self._prompt_of is not None
            prompt = self._prompt_of(self._trace_request)
            assert prompt.size == self.num_prompt_tokens, "the prompt must be built alike"
            self._prompt = prompt
        return self._prompt


class Ledger:
    def __init__(
        self,
        context_steps: int,
        result: RunResult,
        on_retired: Callable[[str, tuple[int, ...]], None],
        prompt_of: PromptOf | None = None,
    ) -> None:
        self.context_steps, self.result, self.on_retired = context_steps, result, on_retired
        self.eos_token_id = result.options.eos_token_id  # the model's: a request stops there
        arrivals = getattr(on_retired, "__self__", None)
        self.arrivals = arrivals if isinstance(arrivals, Arrivals) else None
        if self.arrivals is not None:  # the result keeps every request's outputs: the
            self.arrivals.keep_outputs_in(result.outputs)  # arrivals read them there
        self.prompt_of = prompt_of  # None: each live request's prompt array is kept
        self.forget: list[Callable[[str], None]] = []  # told when a request leaves
        self.live: dict[str, LiveRequest] = {}
        self.num_tokens: dict[str, int] = {}
        self.sampled: dict[str, list[int]] = {}
        self.history: dict[str, deque[StepLine]] = {}

    def admit(self, release: Release, now_s: float) -> EngineRequest:
        """The request a release hands the engine at time `now_s`, now live."""
        trace_req, prompt = release.request, release.prompt_token_ids
        live = LiveRequest(trace_req, prompt, now_s, self.prompt_of)
        request = self._engine_request(
            trace_req,
            prompt,
            now_s,
            # the engine may keep no prompt while it waits: it asks the ledger, which
            # builds the prompt once for the engine and the executor
            prompt_source=live.prompt if self.prompt_of is not None else None,
            continues=self._continues(live.request_id),
        )
        self.live[request.request_id] = live
        self.num_tokens[request.request_id] = request.num_prompt_tokens
        self.sampled[request.request_id] = []
        return request

    def chunk(self, chunk: Chunk, now_s: float) -> EngineRequest:
        """The later turn's input sent while its parent runs (arrivals.Chunk), as the engine
        gets it: an EngineRequest whose prompt is the chunk alone. Not live (the turn is
        released, with its whole prompt, when its parent finishes)."""
        return self._engine_request(chunk.request, chunk.token_ids, now_s)

    def _engine_request(
        self, trace_req: TraceRequest, prompt: np.ndarray, now_s: float, **optional: Any
    ) -> EngineRequest:
        """`trace_req` as the engine gets it at time `now_s`, with `prompt` (its whole
        prompt, or a chunk) and the EngineRequest's `optional` fields."""
        return EngineRequest(
            request_id=trace_req.request_id,
            prompt_token_ids=prompt,
            max_tokens=trace_req.output_length,
            arrival_time_s=now_s,
            priority=trace_req.priority,
            cache_salt=trace_req.cache_salt,
            eos_token_id=self.eos_token_id,
            parent_request_id=trace_req.parent_request_id,
            **optional,
        )

    def _continues(self, request_id: str) -> Callable[[], bool] | None:
        """Asks the arrivals, when the request finishes, whether a later turn waits for it."""
        arrivals = self.arrivals
        return None if arrivals is None else functools.partial(arrivals.is_awaited, request_id)

    def retire(
        self, request_ids: Iterable[str], how: str, outputs: tuple[int, ...] | None = None
    ) -> None:
        """Requests that left the engine, `how`: finished (with the engine's `outputs`, or
        as sampled where None), aborted or rejected. Ids no longer live are skipped."""
        res = self.result
        for rid in request_ids:
            if self.live.pop(rid, None) is None:
                continue
            sampled = tuple(self.sampled.pop(rid, ()))
            done = sampled if outputs is None else tuple(outputs)
            res.outputs[rid] = list(done)
            if how == "finished":
                res.finished += 1
            elif how == "aborted":
                res.aborted += 1
            else:
                res.rejected += 1
            for forget in self.forget:  # bounded: the parts registered
                forget(rid)
            self.num_tokens.pop(rid, None)
            self.history.pop(rid, None)
            self.on_retired(rid, done)

    def prompt(self, request_id: str) -> np.ndarray:
        """A live request's prompt (built again from the trace at its first read)."""
        return self.live[request_id].prompt_token_ids

    def gain(self, request_id: str, tokens: tuple[int, ...]) -> tuple[int, ...]:
        """The tokens a request gained in a step the engine has applied, up to its
        max_tokens or its EOS (an engine stops there and drops the rest of a step's
        accepted drafts, as vLLM does). Returns the tokens kept (none for a request no
        longer live, or stopped)."""
        if request_id not in self.live:
            return ()
        sampled = self.sampled[request_id]
        room = self.live[request_id].max_tokens - len(sampled)
        tokens = tokens[: max(room, 0)]
        eos = self.eos_token_id
        if eos is not None:
            tokens = () if sampled and sampled[-1] == eos else until_eos(tokens, eos)
        self.sampled_by_runner(request_id, tokens)
        return tokens

    def sampled_by_runner(self, request_id: str, tokens: tuple[int, ...]) -> None:
        """Tokens the model runner sampled for a request, all of them (async scheduling:
        the runner may sample past max_tokens before the engine sees the last step)."""
        self.num_tokens[request_id] += len(tokens)
        self.sampled[request_id].extend(tokens)

    def unsample(self, request_id: str, tokens: tuple[int, ...]) -> None:
        """Forget the last `tokens` the runner sampled for a live request: the engine
        dropped them (async scheduling, sim/pipelined.py); they are sampled again."""
        if request_id not in self.live:
            return
        sampled, n = self.sampled[request_id], len(tokens)
        assert tuple(sampled[len(sampled) - n :]) == tokens, f"{request_id}: not its last"
        del sampled[len(sampled) - n :]
        self.num_tokens[request_id] -= n

    def gain_all(
        self, sampled: Mapping[str, int], accepted: Mapping[str, tuple[int, ...]], kept: bool
    ) -> dict[str, tuple[int, ...]]:
        """gain() of each sampling request's accepted drafts and sampled token, in order;
        the tokens kept, per request, where asked for (`kept`) or drafts were accepted."""
        if accepted or kept:
            return {rid: self.gain(rid, (*accepted.get(rid, ()), t)) for rid, t in sampled.items()}
        self._gain_samples(sampled)  # the common case: one loop, one token each
        return {}

    def _gain_samples(self, sampled: Mapping[str, int]) -> None:
        """gain(rid, (token,)) for each rid: token, in one loop."""
        live, lists, num_tokens = self.live, self.sampled, self.num_tokens
        eos = self.eos_token_id
        for rid, token in sampled.items():  # bounded: the step's sampling requests
            request = live.get(rid)
            if request is None:
                continue
            tokens = lists[rid]
            stopped = eos is not None and bool(tokens) and tokens[-1] == eos
            if len(tokens) < request.max_tokens and not stopped:
                tokens.append(token)
                num_tokens[rid] += 1

    def remember(self, output: SchedulerOutput) -> None:
        """Each scheduled request's share of this step (the last `context_steps` kept; the
        objects are immutable, and worded only when a violation quotes them)."""
        history, step = self.history, output.step
        for r in output.scheduled:
            hist = history.get(r.request_id)
            if hist is None:
                hist = history[r.request_id] = deque(maxlen=self.context_steps)
            hist.append((step, r))

    def context(self, request_id: str) -> tuple[str, ...]:
        """The request's last steps, as its violations quote them."""
        lines = []
        for step, r in self.history.get(request_id, ()):
            lines.append(
                f"step {step}: num_computed_tokens {r.num_computed_tokens} + "
                f"num_scheduled_tokens {r.num_scheduled_tokens} of num_tokens {r.num_tokens} "
                f"(cached {r.num_cached_tokens}); {len(r.block_table)} blocks, "
                f"last {list(r.block_table[-3:])}"
            )
        return tuple(lines)
