"""Engines by name, or by an import path `package.module:factory` for users' own engines.

A factory takes an `EngineConfig` and returns an object implementing `protocol.Engine`;
it declares what its engine supports itself (`capabilities.declare`), so a user's engine and
the built-in ones are read the same way. Built-in engines are imported lazily, so the vLLM
adapters cost nothing unless asked for (their modules import vLLM only when an engine is
built).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from schedcheck.engines.capabilities import Capabilities, capabilities_of
from schedcheck.engines.protocol import Engine, EngineConfig

EngineFactory = Callable[[EngineConfig], Engine]

BUILTIN_ENGINES: dict[str, str] = {
    "reference": "schedcheck.engines.reference.engine:make_engine",
    "vllm-v1": "schedcheck.engines.vllm.v1.factory:make_engine",
    "vllm-v0": "schedcheck.engines.vllm.v0.factory:make_engine",
    "sglang": "schedcheck.engines.sglang.factory:make_engine",
    "vllm-engine": "schedcheck.engines.vllm.engine.factory:make_engine",
}


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


def capabilities(name: str) -> Capabilities:
    """What engine `name` declares it supports (`capabilities.UNDECLARED` if nothing)."""
    return capabilities_of(resolve_factory(name))


def fit_config(name: str, config: EngineConfig) -> EngineConfig:
    """`config` as engine `name` accepts it (its declared fit_config; else unchanged)."""
    return capabilities(name).fit(config)


def _load(name: str, path: str) -> Callable[..., Any]:
    module_name, _, attr = path.partition(":")
    module = sys.modules.get(module_name)  # imported already: what import_module returns
    if module is None:
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
