"""Outputs: what a finished request returns is what it would return alone, unchunked.

Properties, checked when a request finishes:
- returned: the engine returns exactly the tokens the executor sampled for the request;
- length: a request that finished for "length" has exactly max_tokens outputs, or fewer
  where max_model_len stops it first (vLLM caps a sequence at max_model_len and reports
  "length"): min(max_tokens, max_model_len - num_prompt_tokens);
- stop: with the model's EOS (SimOptions.eos_token_id), a request's outputs end at the
  first EOS it samples, and one that finished for "stop" ends with it (EOS is checked
  before the length: an EOS sampled as the max_tokens-th token is a "stop");
- unchunked: those tokens equal the run of the request alone, its whole prompt in one
  forward, no cache (the hash model makes that run a pure function of the prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from schedcheck.engines.protocol import FinishedRequest
from schedcheck.invariants import hash_model
from schedcheck.invariants.violation import Violation

Tokens = TypeVar("Tokens", bound=Sequence[int])


def until_eos(tokens: Tokens, eos_token_id: int | None) -> Tokens:
    """`tokens` up to and with the first EOS (where the request stops); all, where none."""
    if eos_token_id is None:
        return tokens
    try:
        k = tokens.index(eos_token_id)
    except ValueError:
        return tokens
    return tokens[: k + 1]  # type: ignore[return-value]


def check_finished(
    step: int,
    finished: FinishedRequest,
    prompt: np.ndarray,
    sampled: np.ndarray,
    max_tokens: int,
    vocab_size: int,
    salt: int = 0,
    unchunked: bool = True,
    max_model_len: int | None = None,
    eos_token_id: int | None = None,
) -> list[Violation]:
    """`unchunked=False` when the tokens come from a real model (the tensor executor does
    its own comparison against unchunked execution)."""
    rid = finished.request_id
    num_returned = len(finished.output_token_ids)
    out: list[Violation] = []
    if list(finished.output_token_ids) != sampled.tolist():  # as ints, compared in C
        returned = np.asarray(finished.output_token_ids, dtype=np.int64)
        k = _first_difference(returned, sampled)
        out.append(
            Violation(
                "outputs.returned",
                step,
                f"returns {returned.size} tokens that differ from the {sampled.size} "
                f"sampled for it, first at output {k}",
                request_id=rid,
                position=prompt.size + k,
                expected=_show(sampled, k),
                found=_show(returned, k),
            )
        )
    num_outputs_max = max_tokens
    if max_model_len is not None:
        num_outputs_max = min(max_tokens, max_model_len - prompt.size)
    if finished.reason == "length" and num_returned != num_outputs_max:
        cap = "" if max_model_len is None else f", max_model_len {max_model_len}"
        out.append(
            Violation(
                "outputs.length",
                step,
                f"finished for length with {num_returned} outputs of a {prompt.size}-token "
                f"prompt; max_tokens is {max_tokens}{cap}",
                request_id=rid,
                expected=str(num_outputs_max),
                found=str(num_returned),
            )
        )
    out += _check_stop(step, finished, eos_token_id)
    k = hash_model.outputs_consistent(prompt, sampled, vocab_size, salt) if unchunked else -1
    if k >= 0:
        want = hash_model.unchunked_outputs(prompt, k + 1, vocab_size, salt)
        out.append(
            Violation(
                "outputs.unchunked",
                step,
                f"output {k} differs from the request run alone, unchunked and uncached",
                request_id=rid,
                position=prompt.size + k,
                expected=str(int(want[k])),
                found=str(int(sampled[k])),
            )
        )
    return out


def _check_stop(step: int, finished: FinishedRequest, eos_token_id: int | None) -> list[Violation]:
    """A "stop" ends with the EOS; a "length" does not (vLLM checks EOS first)."""
    outputs = finished.output_token_ids
    ends_with_eos = eos_token_id is not None and bool(outputs) and outputs[-1] == eos_token_id
    if (finished.reason == "stop") == ends_with_eos:
        return []
    last = str(outputs[-1]) if outputs else "no output"
    why = "do not end with" if finished.reason == "stop" else "end with"
    return [
        Violation(
            "outputs.stop",
            step,
            f"finished for {finished.reason} with {len(outputs)} outputs that {why} the "
            f"model's EOS ({eos_token_id})",
            request_id=finished.request_id,
            expected="stop" if ends_with_eos else f"EOS {eos_token_id} last",
            found=f"{finished.reason}, last output {last}",
        )
    ]


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def _show(tokens: np.ndarray, k: int) -> str:
    return str(int(tokens[k])) if k < tokens.size else "end"
