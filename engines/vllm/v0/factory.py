"""The vllm-v0 adapter's factory, with what it declares it supports.

Importable without vLLM (the adapter module, which imports vLLM at its top, is loaded only
when an engine is built), so the fuzzer can draw configs for the adapter, and tests can
read its declaration, where vLLM is absent.

The adapter drives vLLM's scheduler without its drafter (no draft tokens), with no
scheduling policy set (no priorities), and rejects a prompt vLLM's frontend refuses rather
than one that can never fit the cache. It keeps one block beyond a request's own KV:
can_append_slots (both block managers) counts every block a decode touches as a new
allocation, so it wants a free block even when the last block has room: a request whose KV
fills the cache exactly can be preempted at every decode, forever (found by the first
vllm-v0 campaign; tests/vllm/test_vllm_v0.py pins it). v0 has no cache_salt (vLLM added it
in v1): the adapter refuses a salted request, since ignoring the salt would share a prefix
across salts.
"""

from __future__ import annotations

from schedcheck.engines.capabilities import Capabilities, declare
from schedcheck.engines.protocol import Engine, EngineConfig
from schedcheck.engines.vllm.common import load_adapter
from schedcheck.engines.vllm.v0.fit import fit_config_v0

V0_CAPABILITIES = Capabilities(
    fit_config=fit_config_v0,
    block_managers=("v1", "v2"),
    cache_salt=False,
    priorities=False,
    lookahead_tokens=False,
    eos=False,  # EOS not driven: every request runs to max_tokens
    rejects_oversize=False,
    spare_blocks=1,
)


@declare(V0_CAPABILITIES)
def make_engine(config: EngineConfig) -> Engine:
    """Factory named in the engine registry ("vllm-v0"); block_manager "v1" or "v2"."""
    adapter = load_adapter("schedcheck.engines.vllm.v0.adapter", "vllm-v0.6.0")
    return adapter.make_engine(config)
