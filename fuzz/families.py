"""What a campaign's engine draws, by its spec: the option families of `--family`, drafts,
sliding windows, async scheduling (the predicates fuzz/swarm.py draws by, and the campaign
reads to tell which rare paths it can reach)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from schedcheck.engines.capabilities import Capabilities
from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY
from schedcheck.engines.sglang.fit import STREAMING_SESSION_KEY
from schedcheck.fuzz.swarm_vllm import VLLM_ENGINE_FAMILIES, VLLM_FAMILIES


class SwarmSpec(Protocol):
    """What the predicates read of a campaign's spec (fuzz/swarm.py's SwarmSpec)."""

    @property
    def engine(self) -> str: ...

    @property
    def mutant(self) -> str | None: ...

    @property
    def families(self) -> tuple[str, ...]: ...

    @property
    def is_reference(self) -> bool: ...

    @property
    def capabilities(self) -> Capabilities: ...


# --family: a campaign per option family (vLLM's scheduler options, drafts, sliding windows)
FAMILIES = (*VLLM_FAMILIES, "spec-decode", "sliding-window", "eos", "max-model-len")
# engines drawing vLLM v1's scheduler options, with the families each draws
VLLM_OPTION_ENGINES: Mapping[str, tuple[str, ...]] = {
    "vllm-v1": VLLM_FAMILIES,
    "vllm-engine": VLLM_ENGINE_FAMILIES,
}
# engines that draw the model's EOS and max_model_len in half their examples (others: only
# under --family eos / max-model-len)
BOUNDARY_ENGINES = frozenset({"vllm-v1", "sglang"})
SPEC_ENGINES = frozenset({"vllm-v1", "reference"})  # engines that schedule draft tokens
HYBRID_ENGINES = frozenset({"vllm-v1"})  # engines with sliding-window KV-cache groups


def draws_spec_decode(spec: SwarmSpec) -> bool:
    """Scheduled drafts with acceptance are drawn for the engines that schedule them."""
    return spec.engine in SPEC_ENGINES


def always_spec_decode(spec: SwarmSpec) -> bool:
    """Drafts in every example: asked for (--family), or a mutant that acts on drafts."""
    if "spec-decode" in spec.families:
        return True
    if spec.is_reference and spec.mutant is not None:
        from schedcheck.engines.reference.mutants import SPEC_DECODE_MUTANTS

        return spec.mutant in SPEC_DECODE_MUTANTS
    return False


def draws_eos(spec: SwarmSpec) -> bool:
    """The model's EOS is drawn (fuzz/swarm.py's draw_eos) for an engine that declares EOS
    stops: in every example under --family eos, else in half of BOUNDARY_ENGINES' examples (the
    reference engine's stream stays as it was without the family)."""
    return spec.capabilities.eos and ("eos" in spec.families or spec.engine in BOUNDARY_ENGINES)


def draws_max_model_len(spec: SwarmSpec) -> bool:
    """max_model_len near a request's length (fuzz/swarm.py's draw_max_model_len): in
    every example under --family max-model-len, else in half of BOUNDARY_ENGINES' examples."""
    return "max-model-len" in spec.families or spec.engine in BOUNDARY_ENGINES


def draws_sliding_window(spec: SwarmSpec) -> bool:
    return spec.engine in HYBRID_ENGINES


def draws_vllm_options(spec: SwarmSpec) -> bool:
    """vLLM v1's scheduler options (fuzz/swarm_vllm.py) are drawn for vllm-v1 and, all
    but async scheduling, for vllm-engine (vLLM's whole engine)."""
    return spec.engine in VLLM_OPTION_ENGINES


def vllm_families(spec: SwarmSpec) -> tuple[str, ...]:
    """The option families of fuzz/swarm_vllm.py this engine draws (none: not vLLM)."""
    return VLLM_OPTION_ENGINES.get(spec.engine, ())


def drawable_families(spec: SwarmSpec) -> tuple[str, ...]:
    """The --family names the engine can draw, in FAMILIES order (sglang: async, streaming,
    eos, max-model-len)."""
    drawable = set(vllm_families(spec))
    if spec.is_reference or draws_async_option(spec):
        drawable.add("async")
    if draws_option(spec, STREAMING_SESSION_KEY):  # SGLang's streaming sessions
        drawable.add("streaming")
    drawable |= {"spec-decode"} if draws_spec_decode(spec) else set()
    drawable |= {"sliding-window"} if draws_sliding_window(spec) else set()
    drawable |= {"eos"} if spec.capabilities.eos else set()
    drawable.add("max-model-len")
    return tuple(f for f in FAMILIES if f in drawable)


def undrawable_families(spec: SwarmSpec) -> tuple[str, ...]:
    """The --family names the engine cannot draw (vllm-engine: async, drafts, a sliding
    window; sglang: vLLM's options, drafts, a sliding window), in the order given."""
    drawable = drawable_families(spec)
    return tuple(f for f in spec.families if f not in drawable)


def draws_async(spec: SwarmSpec) -> bool:
    """Async scheduling is drawn in some of the campaign's examples (or all of them)."""
    if spec.is_reference:
        return "async" in spec.families
    return "async" in vllm_families(spec) or draws_async_option(spec)


def draws_async_option(spec: SwarmSpec) -> bool:
    """The engine declares async scheduling among its own drawn options (sglang: overlap)."""
    return draws_option(spec, ASYNC_SCHEDULING_KEY)


def draws_option(spec: SwarmSpec, key: str) -> bool:
    """The engine declares EngineConfig.extra `key` among its own drawn options."""
    return any(k == key for k, _ in spec.capabilities.extra_options)


# an engine's own drawn option that a --family turns on in every example
FAMILY_OPTIONS: Mapping[str, str] = {
    "async": ASYNC_SCHEDULING_KEY,
    "streaming": STREAMING_SESSION_KEY,  # SGLang's streaming sessions
}


def draws_lookahead(spec: SwarmSpec) -> bool:
    """Draft tokens are drawn for engines that declare them (an engine without lookahead
    slots would be blamed for the drafter's writes)."""
    return spec.capabilities.lookahead_tokens
