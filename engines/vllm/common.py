"""What both vLLM adapters (v1/, v0/) need and no vLLM release owns: environment, a tiny
local model config, the shared fit rules, the frontend's prompt-length check, loading an
adapter module, the runner-side block tables, chunk tokens. Imports no vLLM.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from schedcheck.engines.protocol import (
    PLACEHOLDER_TOKEN_ID,
    EngineConfig,
    TokenArray,
)
from schedcheck.engines.registry import EngineLoadError

TINY_VOCAB_SIZE = 1 << 20  # token ids are never embedded; only metadata reads this
EOS_TOKEN_ID = 2  # every request sets ignore_eos, so EOS never stops one


def prepare_environment() -> None:
    """Keep vLLM and transformers off the network and quiet; call before importing vLLM."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # v0 logs to stdout whenever vLLM configures logging, which would corrupt `--json`
    # output; unconfigured, its warnings reach stderr through logging's last resort.
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def fit_config(config: EngineConfig) -> EngineConfig:
    """The config nearest `config` that vLLM's own validation accepts (the fuzzer's swarm
    draws configs for every engine; an engine refusing its config is not a finding).

    Both generations refuse, at construction (v1 `SchedulerConfig.verify_max_model_len`,
    v0 `SchedulerConfig._verify_args`):

        max_num_batched_tokens < max_num_seqs
        max_num_batched_tokens < max_model_len, with chunked prefill off
        long_prefill_token_threshold > max_model_len

    so max_num_seqs is capped at the budget, and with chunked prefill off max_model_len is
    the budget (a longer prompt is then refused by the frontend, as vLLM does). Lookahead
    slots are off (`refuse_lookahead`); scheduled drafts (num_speculative_tokens, vLLM's
    n-gram config) and KV-cache groups are kept as drawn.
    """
    max_model_len = config.max_model_len
    if not config.enable_chunked_prefill:
        max_model_len = min(max_model_len, config.max_num_batched_tokens)
    return dataclasses.replace(
        config,
        max_num_seqs=min(config.max_num_seqs, config.max_num_batched_tokens),
        max_model_len=max_model_len,
        long_prefill_token_threshold=min(config.long_prefill_token_threshold, max_model_len),
        num_lookahead_tokens=0,
    )


def refuse_lookahead(config: EngineConfig) -> None:
    """The adapters drive vLLM's scheduler without its drafter: vLLM derives its lookahead
    from a speculative config (a draft model) the adapters do not build, so a
    num_lookahead_tokens the scheduler would ignore is refused, not silently dropped."""
    if config.num_lookahead_tokens:
        raise ValueError(
            f"num_lookahead_tokens={config.num_lookahead_tokens}: the vLLM adapters do not "
            "model speculative decoding (use 0, or the reference engine)"
        )


@functools.cache
def write_tiny_model_dir(max_model_len: int) -> str:
    """A temp directory holding a tiny Llama `config.json`, so vLLM's ModelConfig resolves
    a model without the hub. Nothing is loaded or run from it. One per max_model_len and
    process (a fuzz campaign builds thousands of engines), removed when the process exits."""
    assert max_model_len >= 1
    path = tempfile.mkdtemp(prefix="schedcheck_vllm_model_")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": TINY_VOCAB_SIZE,
        "max_position_embeddings": max_model_len,
        "rms_norm_eps": 1e-5,
        "bos_token_id": 1,
        "eos_token_id": EOS_TOKEN_ID,
        "torch_dtype": "float32",
    }
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


def frontend_rejection(num_prompt_tokens: int, max_model_len: int) -> str | None:
    """The reason vLLM's frontend refuses a prompt of `num_prompt_tokens` before it reaches
    the scheduler, or None (a streaming-input session's next chunk is checked alone).

    Both engine generations refuse a decoder prompt that leaves no room for one output
    token (v1: `InputProcessor._validate_model_input`; v0: `LLMEngine._validate_model_inputs`
    and the scheduler's "too long" ignore path, which this check pre-empts).
    """
    if num_prompt_tokens >= max_model_len:
        return (
            f"prompt (length {num_prompt_tokens}) plus at least one output token is longer than "
            f"max_model_len {max_model_len}"
        )
    return None


def load_adapter(module_name: str, tox_env: str) -> Any:
    """An adapter module, for its factory; without (that release line of) vLLM, bad usage
    (EngineLoadError, exit 2), not a crash."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineLoadError(
            f"{module_name} cannot import vLLM here ({exc}); its tox env has it: tox -e {tox_env}"
        ) from exc


class RunnerBlockTables:
    """Block tables as the model runner keeps them: set when a request is (re)scheduled
    from scratch, appended with each step's new block ids, dropped when it finishes.

    ScheduledRequest.block_table is read from here, so what the shadow-KV oracle checks is
    the table the real runner would hand to attention, not the manager's own list (the KV
    snapshot exposes that one; an invariant can compare the two). Tuples are cached per
    request and rebuilt only when the table changes.
    """

    def __init__(self) -> None:
        self._lists: dict[str, list[int]] = {}
        self._tuples: dict[str, tuple[int, ...]] = {}

    def set(self, request_id: str, block_ids: Sequence[int]) -> None:
        self._lists[request_id] = list(block_ids)
        self._tuples.pop(request_id, None)

    def extend(self, request_id: str, block_ids: Sequence[int]) -> None:
        if block_ids:
            self._lists[request_id].extend(block_ids)
            self._tuples.pop(request_id, None)

    def drop(self, request_ids: Iterable[str]) -> None:
        for request_id in request_ids:
            self._lists.pop(request_id, None)
            self._tuples.pop(request_id, None)

    def table(self, request_id: str) -> tuple[int, ...]:
        cached = self._tuples.get(request_id)
        if cached is None:
            cached = self._tuples[request_id] = tuple(self._lists[request_id])
        return cached

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._lists


class TokenBuffer:
    """A request's tokens (prompt + emitted outputs), as the model runner keeps them: one
    int64 buffer appended with each sampled token. Chunks are read-only views, no copies;
    a position once handed out never changes (the buffer only grows).

        buffer:  | prompt ............ | out0 out1 ... | (room) |
                 0          num_prompt_tokens     num_tokens  capacity
    """

    __slots__ = ("_buf", "_view", "num_tokens")

    def __init__(self, prompt: TokenArray, max_tokens: int) -> None:
        n = int(prompt.size)
        self._buf = np.empty(n + max_tokens + 1, dtype=np.int64)
        self._buf[:n] = prompt
        self._view = self._read_only(self._buf)
        self.num_tokens = n

    @staticmethod
    def _read_only(buf: np.ndarray) -> TokenArray:
        view = buf.view()
        view.flags.writeable = False
        return view

    def append(self, token_id: int) -> None:
        if self.num_tokens == self._buf.size:  # views handed out keep the old buffer
            self._buf = np.concatenate([self._buf, np.empty_like(self._buf)])
            self._view = self._read_only(self._buf)
        self._buf[self.num_tokens] = token_id
        self.num_tokens += 1

    def chunk(self, start: int, stop: int) -> TokenArray:
        """Tokens [start, stop) as a read-only view."""
        assert 0 <= start < stop <= self.num_tokens, (start, stop, self.num_tokens)
        return self._view[start:stop]

    def chunk_with_placeholders(self, start: int, stop: int) -> TokenArray:
        """Tokens [start, stop); the positions the engine has no token for yet (async
        scheduling: the previous step's sample, still in flight) hold PLACEHOLDER_TOKEN_ID,
        which the runner fills in::

            known tokens:  | ............ num_tokens |
            chunk:                    | start ...... | placeholders | stop
        """
        known = self.num_tokens
        if stop <= known:  # e.g. drafts after a step already applied: no placeholder here
            return self.chunk(start, stop)
        placeholders = np.full(stop - max(start, known), PLACEHOLDER_TOKEN_ID, dtype=np.int64)
        if start >= known:
            return placeholders
        return np.concatenate([self.chunk(start, known), placeholders])


def is_required_field(field: dataclasses.Field[Any]) -> bool:
    """A dataclass field with neither a default nor a default factory (vLLM's classes)."""
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def read_only_prompt(prompt: TokenArray) -> TokenArray:
    """The prompt as an int64 array that no one can write (a view when it already is)."""
    arr = np.asarray(prompt, dtype=np.int64)
    if arr.flags.writeable:
        arr = arr.copy()
        arr.flags.writeable = False
    return arr


class CallCounter:
    """Counts the calls of one method of one vLLM object whose result passes `counts`
    (default: a truthy result).

    Wraps the bound method on the instance (vLLM's class is untouched; the wrapper calls
    the original and returns its result), so an adapter can report what vLLM has no counter
    for, e.g. evictions of cached blocks for the `evict-cached-block` coverage path.
    """

    def __init__(
        self, obj: object | None, method_name: str, counts: Callable[[Any], bool] = bool
    ) -> None:
        """`obj` None: nothing to count (e.g. no evictor without prefix caching)."""
        self.num_calls = 0
        if obj is None:
            return
        original = getattr(obj, method_name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if counts(result):
                self.num_calls += 1
            return result

        setattr(obj, method_name, counted)
