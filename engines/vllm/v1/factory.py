"""The vllm-v1 adapter's factory, with what it declares it supports.

Importable without vLLM (the adapter module, which imports vLLM at its top, is loaded only
when an engine is built), so the fuzzer can draw configs for the adapter, and tests can
read its declaration, where vLLM is absent.

The adapter drives vLLM's scheduler without its drafter model: the scheduler schedules the
simulator's drafts (vLLM's n-gram config, with no lookahead slots; with async scheduling on
a release that runs it only with a draft model, an EAGLE config whose model is never
loaded: `_with_draft_method`). It reads priorities
under --policy priority (the swarm draws that policy for vllm-v1 with its other scheduler
options: fuzz/swarm_vllm.py; docs/vllm-surface.md), rejects a prompt vLLM's frontend
refuses rather than one that can never fit the cache, and keeps one block beyond the
requests' own KV: BlockPool keeps block 0 as its null block.

A release newer than the newest the shims know is tried, after one warning line on standard
error; if it lacks what the adapter reads, the factory refuses it
by name (shapes.py; EngineLoadError: exit 2, never a finding).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable

from schedcheck.engines.capabilities import Capabilities, declare
from schedcheck.engines.protocol import Engine, EngineConfig, is_async_scheduling
from schedcheck.engines.registry import EngineLoadError
from schedcheck.engines.vllm.common import load_adapter
from schedcheck.engines.vllm.v1 import eras
from schedcheck.engines.vllm.v1.fit import fit_config_v1
from schedcheck.engines.vllm.v1.shapes import shape_mismatches

NEWER_WARNED_ENV = "SCHEDCHECK_VLLM_NEWER_WARNED"  # set once the newer-release warning is out
V1_CAPABILITIES = Capabilities(
    fit_config=fit_config_v1,
    priorities=True,
    lookahead_tokens=False,
    rejects_oversize=False,
    spare_blocks=1,
)


@declare(V1_CAPABILITIES)
def make_engine(config: EngineConfig) -> Engine:
    """Factory named in the engine registry ("vllm-v1")."""
    release = eras.installed_release()
    reason = eras.unsupported_reason(release)
    if reason is not None:  # before importing vLLM: another release may not import at all
        raise EngineLoadError(f"{reason} (tox -e vllm-v1, vllm-v1-RELEASE)")
    _warn_once(eras.newer_than_known(release))
    adapter = load_adapter("schedcheck.engines.vllm.v1.adapter", "vllm-v1")
    mismatches = shape_mismatches()
    if mismatches:  # a release the shims were not written for changed what they read
        raise EngineLoadError(
            f"vLLM {release} changed what the vllm-v1 adapter reads: {'; '.join(mismatches)} "
            "(engines/vllm/v1/eras.py)"
        )
    return adapter.make_engine(_with_draft_method(config, adapter.make_engine))


def _warn_once(warning: str | None) -> None:
    """One line on standard error per process tree: the first process to build the engine
    prints it and marks the environment, which worker processes inherit."""
    if warning is None or os.environ.get(NEWER_WARNED_ENV):
        return
    os.environ[NEWER_WARNED_ENV] = "1"
    print(warning, file=sys.stderr, flush=True)


def _with_draft_method(
    config: EngineConfig, make_adapter_engine: Callable[[EngineConfig], Engine]
) -> EngineConfig:
    """`config` with the speculative method production pairs with async scheduling on this
    release (n-gram, else an EAGLE draft model: eras.async_draft_method); a config asking
    for drafts the release cannot take is refused (exit 2: a bundle replayed there is
    `refused`, not clean). The fuzzer fits the same (fit.py). The probe builds an engine
    itself, so it is called here, not in it."""
    if not config.num_speculative_tokens:
        return config
    release = eras.installed_release()
    if not eras.has_draft_token_ids_api():
        raise ValueError(f"vLLM {release} takes no drafts by update_draft_token_ids (0.11.0 on)")
    if not is_async_scheduling(config) or eras.DRAFT_METHOD_KEY in config.extra:
        return config  # a bundle's method is kept: vLLM's own validation judges it
    method = eras.async_draft_method(make_adapter_engine)
    if method is None:
        raise ValueError(
            f"vLLM {release} does not run async scheduling with drafts (neither n-gram nor "
            "an EAGLE draft model)"
        )
    if method == "ngram":
        return config
    return dataclasses.replace(config, extra={**config.extra, eras.DRAFT_METHOD_KEY: method})
