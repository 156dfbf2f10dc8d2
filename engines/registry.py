"""Engines by name, or by an import path `package.module:factory` for users' own engines.

A factory takes an `EngineConfig` and returns an object implementing `protocol.Engine`.
Built-in engines are imported lazily, so the vLLM adapters cost nothing unless asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from schedcheck.engines.protocol import Engine, EngineConfig

EngineFactory = Callable[[EngineConfig], Engine]

BUILTIN_ENGINES: dict[str, str] = {
    "reference": "schedcheck.engines.reference.engine:make_engine",
    "vllm-v1": "schedcheck.engines.vllm_v1:make_engine",
    "vllm-v0": "schedcheck.engines.vllm_v0:make_engine",
    "sglang": "schedcheck.engines.sglang_engine:make_engine",
}


# Engines whose own config validation refuses some configs the fuzzer's swarm draws: a
# function EngineConfig -> EngineConfig giving the nearest config the engine accepts.
CONFIG_FITTERS: dict[str, str] = {
    "vllm-v1": "schedcheck.engines.vllm.common:fit_config",
    "vllm-v0": "schedcheck.engines.vllm.common:fit_config_v0",
    "sglang": "schedcheck.engines.sglang_rt.fit:fit_config",
}

# Blocks beyond a request's own KV that an engine needs to run that request alone.
SPARE_BLOCKS: dict[str, int] = {
    "vllm-v1": 1,  # BlockPool keeps block 0 as its null block
    # can_append_slots (both block managers) counts every block a decode touches as a new
    # allocation, so it wants a free block even when the last block has room: a request
    # whose KV fills the cache exactly can be preempted at every decode, forever (found by
    # the first vllm-v0 campaign; tests/vllm/test_vllm_v0.py pins it)
    "vllm-v0": 1,
    "sglang": 1,  # SGLang keeps page 0 (slots 0..page_size-1) for padded tokens
}

# Engines with no cache_salt (vLLM added it in v1): a salted request would share its prefix
# across salts there, so the fuzzer draws no salts for them and their adapters refuse one.
WITHOUT_CACHE_SALT: frozenset[str] = frozenset({"vllm-v0"})


class EngineLoadError(ValueError):
    """The engine name or import path does not name a usable factory."""


def resolve_factory(name: str) -> EngineFactory:
    path = BUILTIN_ENGINES.get(name, name)
    if ":" not in path:
        known = ", ".join(sorted(BUILTIN_ENGINES))
        raise EngineLoadError(
            f"unknown engine {name!r}: use one of {known} or 'package.module:factory'"
        )
    return _load(name, path)


def fit_config(name: str, config: EngineConfig) -> EngineConfig:
    """`config` as engine `name` accepts it (unchanged for engines with no fitter)."""
    path = CONFIG_FITTERS.get(name)
    return config if path is None else _load(name, path)(config)


def supports_cache_salt(name: str) -> bool:
    return name not in WITHOUT_CACHE_SALT


def spare_blocks(name: str) -> int:
    return SPARE_BLOCKS.get(name, 0)


def _load(name: str, path: str) -> Callable[..., Any]:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineLoadError(f"engine {name!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise EngineLoadError(f"engine {name!r}: {module_name} has no callable {attr!r}")
    return factory


def make_engine(name: str, config: EngineConfig) -> Engine:
    return resolve_factory(name)(config)
