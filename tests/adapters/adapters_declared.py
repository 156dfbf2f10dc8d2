"""A user's engine that declares less than a full-featured one: the reference engine
behind a factory declaring no cache salts and block sizes of 8 and more only. It records
every config it is built with and every request it is given, and refuses what it does not
support, so a test can see what the fuzzer drew for it."""

from __future__ import annotations

import dataclasses

from schedcheck.engines.capabilities import declare
from schedcheck.engines.protocol import EngineConfig, EngineRequest
from schedcheck.engines.reference.engine import CAPABILITIES, ReferenceEngine

DECLARED = dataclasses.replace(CAPABILITIES, cache_salt=False, block_sizes=(8, 16, 32))
BUILT: list[EngineConfig] = []  # every config an engine was built with, in order
ADDED: list[EngineRequest] = []  # every request added to one of them


class SaltlessLargeBlockEngine(ReferenceEngine):
    name = "saltless-large-block"

    def __init__(self, config: EngineConfig) -> None:
        if config.block_size < 8:
            raise ValueError(f"block_size {config.block_size}: this engine needs >= 8")
        BUILT.append(config)
        super().__init__(config)

    def add_request(self, request: EngineRequest) -> None:
        if request.cache_salt is not None:
            raise ValueError(f"{request.request_id}: this engine has no cache_salt")
        ADDED.append(request)
        super().add_request(request)


@declare(DECLARED)
def make_engine(config: EngineConfig) -> SaltlessLargeBlockEngine:
    return SaltlessLargeBlockEngine(config)


def make_undeclared(config: EngineConfig) -> ReferenceEngine:
    """The reference engine behind a factory that declares nothing."""
    return ReferenceEngine(config)


def _no_chunking_with_prefix_caching(config: EngineConfig) -> EngineConfig:
    """vLLM 0.5's rule: chunked prefill and prefix caching never on together (fit_config_v0
    on 0.5.x), with the prompt-length limit vLLM derives from the budget when unchunked."""
    if config.enable_chunked_prefill and config.enable_prefix_caching:
        config = dataclasses.replace(config, enable_chunked_prefill=False)
    if not config.enable_chunked_prefill:
        limit = min(config.max_model_len, config.max_num_batched_tokens)
        config = dataclasses.replace(config, max_model_len=limit)
    return config


@declare(dataclasses.replace(CAPABILITIES, fit_config=_no_chunking_with_prefix_caching))
def make_one_or_the_other(config: EngineConfig) -> ReferenceEngine:
    """The reference engine behind a fitter that never combines the two features."""
    return ReferenceEngine(config)
