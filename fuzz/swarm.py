"""Swarm engine configs: every example draws its own options (TigerBeetle VOPR's swarm).

A fixed config tests one corner; drawing the config per example makes each run test a
different one, and lets Hypothesis shrink the config along with the trace. Drawn:

    block_size                   4, 2, 8, 16, 1 (shrinks towards 4), those the engine
                                 accepts (else the smallest it declares)
    max_num_batched_tokens       boundary_lengths: multiples of block_size, +-1, any
    max_num_seqs                 256, 1, 2, 3, 4, 6
    prefix caching, chunked      on / off, where the engine accepts both (with chunked
    prefill                      prefill off, half the examples raise the budget so every
                                 prompt fits it)
    long_prefill_token_threshold 0 (off) or a boundary length
    num_lookahead_tokens         engines with draft tokens: half the examples 0 (shrinks
                                 there), else 1, 2, 3 or 5 (speculative decoding, vllm#16370)
    num_speculative_tokens,      engines that schedule drafts (SPEC_ENGINES): half the
    draft_acceptance             examples 0 (shrinks there), else K in 1, 2, 3, 5 with an
                                 acceptance probability P in 0.7, 0, 0.3, 0.9, 1; every
                                 example under --family spec-decode or a draft mutant
    kv_groups                    engines with hybrid KV-cache groups (HYBRID_ENGINES): half
                                 the examples "full", else "full,sliding:W" with W a
                                 boundary length (a window shorter than, equal to or just
                                 past a block, or several blocks)
    block_manager                one the engine declares, unless fixed by the spec/mutant
    extra options                each EngineConfig.extra key the engine declares (the
                                 reference: chunk_align, policy); chunk_align "block"
                                 raises the budget and threshold to one block at least (a
                                 chunk cut to a block boundary is empty below that)
    vLLM scheduler options       vllm-v1 (fuzz/swarm_vllm.py): policy, async scheduling,
                                 max_num_scheduled_tokens, watermark, queue limits, ...,
                                 by family, each on in half the examples (--family: all);
                                 vllm-engine: the same but async scheduling (its CPU
                                 platform turns it off);
                                 the reference engine: async scheduling under --family async
                                 only (then without drafts), so a seed's examples stay
    num_gpu_blocks               the least that lets every request run alone, plus a slack
                                 drawn from (0, 1, 2, 4, 8, 16, 64): slack 0 forces
                                 preemption and eviction, and is what shrinking moves
                                 towards (the same pressure with fewer requests);
                                 sometimes (engines that reject what can never fit) one
                                 block too few for the largest request, which must be
                                 rejected
    faults                       per kind 0 or a per-step probability (sim/faults.py);
                                 abort-mid-chunk only for engines with aborts
    eos_token_id, vocab_size     the model's EOS (engines that declare EOS stops: vllm-v1 and
                                 sglang in half the examples, any under --family eos): a vocabulary
                                 of 8, 2 or 64 sampled ids, one of them the EOS, so a
                                 request stops at about one sampled token in that many
                                 (shrinks to no EOS, then to the first id)
    max_model_len                near one request's own prompt + output_length (exactly, one
                                 short or past it, its prompt + 1, its prompt: refused) in
                                 half of vllm-v1's and sglang's examples, any engine's under
                                 --family max-model-len; else 131,072 (what it shrinks to)
    trace features               cache salts, priorities (under a "priority" policy, if
                                 the engine has one), aborts and later turns only for
                                 engines that declare them

What an engine supports is its own declaration (engines/capabilities.py), read through
`engines.registry.capabilities`. Last, an engine with its own config validation (vLLM)
moves the drawn config to the nearest one it accepts (its declared `fit_config`), so a
refused config is never a finding.

The least num_gpu_blocks: the engine's declared spare blocks, and request i needs
cdiv(kv_tokens_i, block_size) blocks, where
kv_tokens_i = full prompt (a later turn: parent's full prompt + parent's outputs + own)
+ output_length, minus 1 when the engine never writes KV for the last sampled token
(`kv_of_last_token` False: the reference engine), plus num_lookahead_tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypothesis import strategies as st

from schedcheck.engines.capabilities import Capabilities
from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig
from schedcheck.engines.registry import capabilities
from schedcheck.fuzz.families import (
    FAMILIES as FAMILIES,  # the CLI's choices
)
from schedcheck.fuzz.families import (
    FAMILY_OPTIONS,
    VLLM_OPTION_ENGINES,
    always_spec_decode,
    draws_eos,
    draws_lookahead,
    draws_max_model_len,
    draws_sliding_window,
    draws_spec_decode,
    draws_vllm_options,
)
from schedcheck.fuzz.strategies import (
    BOOLEANS,
    TraceFeatures,
    cdiv,
    draw_boundary_length,
    draw_features,
    family_on,
    integers,
    pick,
)
from schedcheck.fuzz.swarm_vllm import draw_vllm_v1_extra
from schedcheck.sim.faults import FAULT_KINDS
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE, FIRST_TOKEN_ID

BLOCK_SIZES = (4, 2, 8, 16, 1)
EOS_SPANS = (8, 2, 64)
BUDGET_TOKENS_MAX = 64
MAX_NUM_SEQS = (256, 1, 2, 3, 4, 6)
SLACK_BLOCKS = (0, 1, 2, 4, 8, 16, 64)
FAULT_PROBABILITIES = (0.0, 0.02, 0.1, 0.25)
LOOKAHEAD_TOKENS = (1, 2, 3, 5)
BLOCK_MANAGERS = ("hashed", "radix")
SPEC_TOKENS = (1, 2, 3, 5)
DRAFT_ACCEPTANCES = (0.7, 0.0, 0.3, 0.9, 1.0)


@dataclass(frozen=True, slots=True)
class SwarmSpec:
    """What a campaign fuzzes: the engine, its mutant, and which knobs are drawn."""

    engine: str = "reference"
    mutant: str | None = None
    block_manager: str | None = None  # None: drawn (reference) or the engine's default
    faults: bool = True
    oversize: bool | None = None  # sometimes too few blocks for one request; None: reference
    ignore: tuple[str, ...] = ()  # invariants of known behaviours, not findings (--ignore)
    families: tuple[str, ...] = ()  # option families drawn on in every example (--family)

    @property
    def is_reference(self) -> bool:
        return self.engine == "reference"

    @property
    def capabilities(self) -> Capabilities:
        return capabilities(self.engine)

    @property
    def draws_oversize(self) -> bool:
        if self.oversize is not None:
            return self.oversize
        return self.capabilities.rejects_oversize


@dataclass(frozen=True, slots=True)
class Knobs:
    """The config drawn before the trace (the trace's lengths depend on them)."""

    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    long_prefill_token_threshold: int
    block_manager: str
    extra: tuple[tuple[str, str], ...]
    num_lookahead_tokens: int = 0
    num_speculative_tokens: int = 0
    draft_acceptance: float = 0.7
    kv_groups: str = "full"

    @property
    def num_kv_groups(self) -> int:
        return self.kv_groups.count(",") + 1


def fixed_block_manager(spec: SwarmSpec) -> str | None:
    """The block manager the spec or its mutant's component imposes (None: free)."""
    if spec.block_manager is not None:
        return spec.block_manager
    if spec.is_reference and spec.mutant is not None:
        from schedcheck.engines.reference.mutants import get_mutant

        component = get_mutant(spec.mutant).component
        if component in BLOCK_MANAGERS:
            return component
    return None


def draw_knobs(draw: st.DrawFn, spec: SwarmSpec) -> Knobs:
    caps = spec.capabilities
    block_size = pick(draw, block_sizes(caps))
    blocks_max = max(2, BUDGET_TOKENS_MAX // block_size)
    threshold = draw_boundary_length(draw, block_size, blocks_max, 1) if draw(BOOLEANS) else 0
    manager = fixed_block_manager(spec)
    if manager is None:
        managers = caps.block_managers
        manager = pick(draw, managers) if len(managers) > 1 else managers[0]
    budget_tokens = draw_boundary_length(draw, block_size, blocks_max, 1)
    extra = tuple((key, pick(draw, values)) for key, values in caps.extra_options)
    on = {FAMILY_OPTIONS[f] for f in spec.families if f in FAMILY_OPTIONS}  # every example
    extra = tuple((k, "true" if k in on else v) for k, v in extra)
    if dict(extra).get("chunk_align") == "block":  # a chunk cut to a block boundary
        budget_tokens = max(budget_tokens, block_size)  # needs room for one block
        threshold = max(threshold, block_size) if threshold else 0
    if draws_vllm_options(spec):
        drawable = VLLM_OPTION_ENGINES[spec.engine]
        extra += draw_vllm_v1_extra(draw, spec.families, block_size, blocks_max, drawable)
    elif spec.is_reference and "async" in spec.families:  # no draws: the stream is kept
        extra += ((ASYNC_SCHEDULING_KEY, "true"),)
    # draw order matters (a seed replays the same examples): as the fields below
    max_num_seqs = pick(draw, MAX_NUM_SEQS)
    enable_prefix_caching = draw_flag(draw, caps.enable_prefix_caching, shrinks_to=False)
    enable_chunked_prefill = draw_flag(draw, caps.enable_chunked_prefill, shrinks_to=True)
    num_lookahead_tokens = draw_lookahead(draw, spec)
    num_spec_tokens, acceptance = draw_spec_decode(draw, spec)
    if spec.is_reference and "async" in spec.families:
        num_spec_tokens = 0  # the reference engine has no optimistic drafts (exit 2)
    return Knobs(
        block_size=block_size,
        max_num_batched_tokens=budget_tokens,
        max_num_seqs=max_num_seqs,
        enable_prefix_caching=enable_prefix_caching,
        enable_chunked_prefill=enable_chunked_prefill,
        long_prefill_token_threshold=threshold,
        block_manager=manager,
        extra=extra,
        num_lookahead_tokens=num_lookahead_tokens,
        num_speculative_tokens=num_spec_tokens,
        draft_acceptance=acceptance,
        kv_groups=draw_kv_groups(draw, spec, block_size, blocks_max),
    )


def draw_spec_decode(draw: st.DrawFn, spec: SwarmSpec) -> tuple[int, float]:
    """(num_speculative_tokens, draft_acceptance); K = 0 is off."""
    if not draws_spec_decode(spec):
        return 0, 0.7
    if not always_spec_decode(spec) and not draw(BOOLEANS):
        return 0, 0.7
    return pick(draw, SPEC_TOKENS), pick(draw, DRAFT_ACCEPTANCES)


def draw_kv_groups(draw: st.DrawFn, spec: SwarmSpec, block_size: int, blocks_max: int) -> str:
    if not draws_sliding_window(spec):
        return "full"
    if not family_on(draw, spec.families, "sliding-window"):
        return "full"
    return f"full,sliding:{draw_boundary_length(draw, block_size, blocks_max, 1)}"


def block_sizes(caps: Capabilities) -> tuple[int, ...]:
    """The swarm's block sizes the engine accepts, else the engine's own (smallest first)."""
    accepted = tuple(b for b in BLOCK_SIZES if caps.accepts_block_size(b))
    return accepted or tuple(sorted(caps.block_sizes or ()))


def draw_flag(draw: st.DrawFn, accepted: tuple[bool, ...], shrinks_to: bool) -> bool:
    """A boolean option: drawn where the engine accepts both values, else its one value."""
    if len(set(accepted)) == 1:
        return accepted[0]
    return draw(BOOLEANS) != shrinks_to


def draw_lookahead(draw: st.DrawFn, spec: SwarmSpec) -> int:
    if not draws_lookahead(spec) or not draw(BOOLEANS):
        return 0
    return pick(draw, LOOKAHEAD_TOKENS)


def draw_features_for(draw: st.DrawFn, knob: Knobs, spec: SwarmSpec) -> TraceFeatures:
    """The trace features the engine declares; priorities only where its policy (if it
    has one to draw) reads them."""
    caps = spec.capabilities
    features = draw_features(
        draw,
        priorities=caps.priorities and dict(knob.extra).get("policy", "priority") == "priority",
        salts=caps.cache_salt,
    )
    return dataclasses.replace(
        features,
        aborts=features.aborts and caps.aborts,
        sessions=features.sessions and caps.later_turns,
    )


def kv_blocks_needed(
    requests: tuple[TraceRequest, ...],
    block_size: int,
    last_token_needs_kv: bool,
    num_lookahead_tokens: int = 0,
) -> list[int]:
    """Blocks each request needs to run alone (a later turn carries its parent's history),
    draft slots included."""
    full_tokens: dict[str, int] = {}
    out: list[int] = []
    for request in requests:  # parents come first (the reader's rule)
        num_tokens = request.num_own_prompt_tokens
        parent = request.parent_request_id
        if parent is not None:
            parent_request = next(r for r in requests if r.request_id == parent)
            num_tokens += full_tokens[parent] + parent_request.output_length
        full_tokens[request.request_id] = num_tokens
        kv_tokens = num_tokens + request.output_length - (0 if last_token_needs_kv else 1)
        kv_tokens += num_lookahead_tokens
        out.append(cdiv(kv_tokens, block_size))
    return out


def blocks_to_run_alone(
    requests: tuple[TraceRequest, ...],
    caps: Capabilities,
    block_size: int,
    num_draft_slots: int,
    num_kv_groups: int,
) -> int:
    """The pool that runs the largest request alone: its blocks (draft slots included) in
    every KV-cache group (each group holds its own blocks of the one pool), plus the
    engine's spare blocks. The swarm never draws fewer (unless it draws an oversize
    request on purpose), and the shrinker never tightens below it."""
    assert num_kv_groups >= 1 and num_draft_slots >= 0
    need_max = max(kv_blocks_needed(requests, block_size, caps.kv_of_last_token, num_draft_slots))
    return need_max * num_kv_groups + caps.spare_blocks


def draw_num_gpu_blocks(
    draw: st.DrawFn, spec: SwarmSpec, requests: tuple[TraceRequest, ...], knob: Knobs
) -> int:
    """Enough blocks for the largest request alone, plus a drawn slack (or one too few)."""
    need_max = blocks_to_run_alone(
        requests,
        spec.capabilities,
        knob.block_size,
        knob.num_lookahead_tokens + knob.num_speculative_tokens,
        knob.num_kv_groups,
    )
    if spec.draws_oversize and draw(integers(0, 7)) == 7:
        return max(1, need_max - 1)
    return need_max + pick(draw, SLACK_BLOCKS)


def draw_eos(draw: st.DrawFn, spec: SwarmSpec) -> tuple[int, int | None]:
    """(vocab_size, eos_token_id): the model's EOS where `draws_eos`, else none."""
    if not draws_eos(spec) or not family_on(draw, spec.families, "eos"):
        return DEFAULT_VOCAB_SIZE, None
    span = pick(draw, EOS_SPANS)  # sampled ids: a stop at about one token in `span`
    return FIRST_TOKEN_ID + span, FIRST_TOKEN_ID + draw(integers(0, span - 1))


def draw_max_model_len(
    draw: st.DrawFn, spec: SwarmSpec, requests: tuple[TraceRequest, ...]
) -> int | None:
    """max_model_len at one request's boundaries where `draws_max_model_len`; None: the
    default (a sequence of any drawn length fits)."""
    if not draws_max_model_len(spec) or not family_on(draw, spec.families, "max-model-len"):
        return None
    request = requests[draw(integers(0, len(requests) - 1))]
    end = request.num_own_prompt_tokens + request.output_length
    return max(2, end + pick(draw, (0, -1, 1, 1 - request.output_length, -request.output_length)))


def draw_faults(draw: st.DrawFn, spec: SwarmSpec) -> tuple[tuple[str, float], ...]:
    """(kind, probability) for the kinds switched on; () when faults are off."""
    if not spec.faults or not draw(BOOLEANS):
        return ()
    drawn = [(kind, pick(draw, FAULT_PROBABILITIES)) for kind in FAULT_KINDS]
    aborts = spec.capabilities.aborts
    return tuple((k, p) for k, p in drawn if p > 0.0 and (aborts or k != "abort-mid-chunk"))


def budget_for_unchunked(knob: Knobs, requests: tuple[TraceRequest, ...]) -> int:
    """With chunked prefill off: a budget every prompt (and its outputs) fits in."""
    need_tokens = max(
        b * knob.block_size for b in kv_blocks_needed(requests, knob.block_size, True)
    )
    return max(knob.max_num_batched_tokens, need_tokens)


def engine_config(
    spec: SwarmSpec,
    knob: Knobs,
    num_blocks: int,
    budget_tokens: int,
    max_model_len: int | None = None,
) -> EngineConfig:
    drawn = EngineConfig(
        block_size=knob.block_size,
        num_gpu_blocks=num_blocks,
        max_num_batched_tokens=budget_tokens,
        max_num_seqs=knob.max_num_seqs,
        enable_prefix_caching=knob.enable_prefix_caching,
        enable_chunked_prefill=knob.enable_chunked_prefill,
        long_prefill_token_threshold=knob.long_prefill_token_threshold,
        num_lookahead_tokens=knob.num_lookahead_tokens,
        num_speculative_tokens=knob.num_speculative_tokens,
        kv_groups=knob.kv_groups,
        block_manager=knob.block_manager,
        mutant=spec.mutant,
        extra=dict(knob.extra),
    )
    if max_model_len is not None:
        drawn = dataclasses.replace(drawn, max_model_len=max_model_len)
    return spec.capabilities.fit(drawn)
