"""The vLLM adapters' factories, with what each declares it supports.

Importable without vLLM (the adapter modules import it at their top), so the fuzzer can
draw configs for an adapter, and tests can read its declaration, where vLLM is absent.

Both adapters drive vLLM's scheduler without its drafter (no draft tokens), v0 with no
scheduling policy set (no priorities; v1 has --policy), and reject a prompt vLLM's
frontend refuses rather than one that can never fit the cache; both keep a block beyond
a request's own KV:
- v1: BlockPool keeps block 0 as its null block;
- v0: can_append_slots (both block managers) counts every block a decode touches as a new
  allocation, so it wants a free block even when the last block has room: a request whose
  KV fills the cache exactly can be preempted at every decode, forever (found by the first
  vllm-v0 campaign; tests/vllm/test_vllm_v0.py pins it).
v0 has no cache_salt (vLLM added it in v1): its adapter refuses a salted request, since
ignoring the salt would share a prefix across salts.
"""

from __future__ import annotations

import importlib
from typing import Any

from schedcheck.engines.capabilities import Capabilities, declare
from schedcheck.engines.protocol import Engine, EngineConfig, is_async_scheduling
from schedcheck.engines.registry import EngineLoadError
from schedcheck.engines.vllm import v1_eras
from schedcheck.engines.vllm.common import fit_config_v0
from schedcheck.engines.vllm.v1_fit import fit_config_v1

# v1 reads priorities under --policy priority (the swarm draws that policy for vllm-v1 with
# its other scheduler options: fuzz/swarm_vllm.py; docs/vllm-surface.md)
V1_CAPABILITIES = Capabilities(
    fit_config=fit_config_v1,
    priorities=True,
    lookahead_tokens=False,
    rejects_oversize=False,
    spare_blocks=1,
)
V0_CAPABILITIES = Capabilities(
    fit_config=fit_config_v0,
    block_managers=("v1", "v2"),
    cache_salt=False,
    priorities=False,
    lookahead_tokens=False,
    rejects_oversize=False,
    spare_blocks=1,
)


@declare(V1_CAPABILITIES)
def make_v1_engine(config: EngineConfig) -> Engine:
    reason = v1_eras.unsupported_reason(v1_eras.installed_release())
    if reason is not None:  # before importing vLLM: another release may not import at all
        raise EngineLoadError(f"{reason} (tox -e vllm-v1, vllm-v1-RELEASE)")
    adapter = _adapter("schedcheck.engines.vllm_v1", "vllm-v1")
    _refuse_what_the_release_lacks(config)
    return adapter.make_engine(config)


def _refuse_what_the_release_lacks(config: EngineConfig) -> None:
    """A config asking for drafts the installed release cannot take is refused (exit 2: a
    bundle replayed there is `refused`, not clean); the fuzzer fits them away first
    (v1_fit.py). The probe builds an engine itself, so it is called here, not in it."""
    if not config.num_speculative_tokens:
        return
    release = v1_eras.installed_release()
    if not v1_eras.has_draft_token_ids_api():
        raise ValueError(f"vLLM {release} takes no drafts by update_draft_token_ids (0.11.0 on)")
    if is_async_scheduling(config) and not v1_eras.async_drafts_accepted():
        raise ValueError(f"vLLM {release} does not run async scheduling with n-gram drafts")


@declare(V0_CAPABILITIES)
def make_v0_engine(config: EngineConfig) -> Engine:
    return _adapter("schedcheck.engines.vllm_v0", "vllm-v0.6.0").make_engine(config)


def _adapter(module_name: str, tox_env: str) -> Any:
    """The adapter module; without (that release line of) vLLM, bad usage, not a crash."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineLoadError(
            f"{module_name} cannot import vLLM here ({exc}); its tox env has it: tox -e {tox_env}"
        ) from exc
