"""The kit's scenarios: each a few requests on a small cache, and what the engine must do.

Every check runs the whole simulation loop (the protocol boundary, token accounting, the
shadow KV, the block pool, outputs against unchunked execution, liveness), so any violation
is a failure of that check; each then asserts what its scenario is about. Sizes are in
blocks of the kit's block size `bs` (4, or the smallest the engine accepts) and a token
budget of 2 blocks per step::

    admission        r0: 2 blocks + 1 token, 3 outputs: admitted at num_computed_tokens 0
    chunked-prefill  r0: 3 budgets + 1 token: prefilled over several steps, no chunk over
                     the budget
    prefix-hit       r0, then (after r0 finished) r1 = r0's first 2 blocks + other tokens:
                     r1 admitted with a hit (how much is the engine's choice: vLLM v0.6
                     recomputes the last token of a hit that ends a block)
    full-hit         r0, then r1 = r0's prompt (exactly 2 blocks): r1 cached, yet at least
                     its last token computed (logits are needed, vllm#7753)
    cache-salt       r0 salted "a", then r1 = the same prompt salted "b": no hit across salts
    preemption       r0, r1 (2 blocks + 1 token, 8 outputs each) on a cache that holds one
                     of them alone: both finish (preempted and resumed, or one waiting)
    abort-mid-chunk  r0: 4 budgets, aborted after its first chunk; then r1 needs the whole
                     cache: r0's blocks came back
    rejection        r0 needs more blocks than the cache holds: rejected, r1 still runs
    later-turn       r0, then r1 its later turn: r1's prompt is r0's history + its own
    finish           r0, r1: every output, then a snapshot with no table and all blocks free

A check the engine's declared capabilities rule out is skipped, and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from schedcheck.engines.capabilities import Capabilities
from schedcheck.engines.protocol import EngineConfig, KVSnapshot, ScheduledRequest
from schedcheck.sim.result import RunResult
from schedcheck.traces.schema import TraceRequest

LATER_S = 1.0  # an arrival after every earlier request has finished (100 unit steps)


@dataclass(frozen=True, slots=True)
class Layout:
    bs: int  # block size
    budget: int  # max_num_batched_tokens: 2 blocks

    def tokens(self, first: int, num_tokens: int) -> tuple[int, ...]:
        return tuple(range(first, first + num_tokens))


@dataclass
class Observed:
    """What a check's run gave: the result, the recorded schedule, the final snapshot."""

    result: RunResult
    snapshot: KVSnapshot | None
    layout: Layout
    notes: list[str] = field(default_factory=list)  # what was observed, for the report

    def chunks(self, request_id: str) -> list[ScheduledRequest]:
        return [r for o in self.result.schedule for r in o.scheduled if r.request_id == request_id]

    def first(self, request_id: str) -> ScheduledRequest | None:
        chunks = self.chunks(request_id)
        return chunks[0] if chunks else None

    def outputs(self, request_id: str) -> int:
        return len(self.result.outputs.get(request_id, ()))


Expect = Callable[[Observed], list[str]]


@dataclass(frozen=True)
class Check:
    name: str
    requests: Callable[[Layout], tuple[TraceRequest, ...]]
    expect: Expect
    skip: Callable[[Capabilities], str | None] = lambda caps: None
    config: Callable[[Layout, EngineConfig], dict[str, Any]] = lambda lay, cfg: {}
    chunked: bool = False  # needs chunked prefill on (the engine's fit_config may refuse)


def _req(rid: str, prompt: tuple[int, ...], outputs: int, at_s: float = 0.0, **kw) -> TraceRequest:
    return TraceRequest(rid, at_s, outputs, prompt_token_ids=prompt, **kw)


def _all_outputs(seen: Observed, wanted: dict[str, int]) -> list[str]:
    return [
        f"{rid} finished with {seen.outputs(rid)} output tokens, max_tokens is {n}"
        for rid, n in wanted.items()
        if seen.outputs(rid) != n
    ]


def _needs(flag: str, why: str) -> Callable[[Capabilities], str | None]:
    def skip(caps: Capabilities) -> str | None:
        return None if getattr(caps, flag) else f"the engine declares no {why}"

    return skip


def _needs_aborts_mid_chunk(caps: Capabilities) -> str | None:
    return _needs("aborts", "aborts")(caps) or _needs_on("enable_chunked_prefill")(caps)


def _needs_on(option: str) -> Callable[[Capabilities], str | None]:
    def skip(caps: Capabilities) -> str | None:
        accepted = getattr(caps, option)
        return None if True in accepted else f"the engine runs only with {option} off"

    return skip


# -- admission, chunked prefill, finish ---------------------------------------------------


def _admission(lay: Layout) -> tuple[TraceRequest, ...]:
    return (_req("r0", lay.tokens(100, 2 * lay.bs + 1), 3),)


def _expect_admission(seen: Observed) -> list[str]:
    first = seen.first("r0")
    if first is None:
        return ["r0 was never scheduled"]
    out = []
    if (first.num_computed_tokens, first.num_cached_tokens) != (0, 0):
        out.append(
            f"r0 admitted at num_computed_tokens {first.num_computed_tokens} (cached "
            f"{first.num_cached_tokens}) with an empty cache; expected 0"
        )
    return out + _all_outputs(seen, {"r0": 3})


def _chunked(lay: Layout) -> tuple[TraceRequest, ...]:
    return (_req("r0", lay.tokens(100, 3 * lay.budget + 1), 2),)


def _expect_chunked(seen: Observed) -> list[str]:
    prefill = [c for c in seen.chunks("r0") if c.num_computed_tokens < c.num_prompt_tokens]
    sizes = [c.num_scheduled_tokens for c in prefill]
    seen.notes.append(f"prefill chunks {sizes}")
    budget = seen.layout.budget
    out = [f"a chunk of {n} tokens, the budget is {budget}" for n in sizes if n > budget]
    if len(prefill) < 4:
        out.append(
            f"r0's {3 * budget + 1}-token prompt prefilled in {len(prefill)} step(s) with a "
            f"budget of {budget} tokens a step; expected at least 4 chunks"
        )
    return out + _all_outputs(seen, {"r0": 2})


def _finish(lay: Layout) -> tuple[TraceRequest, ...]:
    return (
        _req("r0", lay.tokens(100, lay.bs + 1), 4),
        _req("r1", lay.tokens(300, 2 * lay.bs - 1), 2, 0.01),
    )


def _expect_finish(seen: Observed) -> list[str]:
    out = _all_outputs(seen, {"r0": 4, "r1": 2})
    snap = seen.snapshot
    if snap is None:
        return [*out, "no KV snapshot after the run"]
    tables = {rid: list(t) for rid, t in snap.block_tables().items() if len(t)}
    if tables:
        out.append(f"after every request finished, the snapshot still holds tables {tables}")
    computed = dict(snap.num_computed_tokens())
    if computed:
        out.append(f"after every request finished, num_computed_tokens() is {computed}")
    return out + _snapshot_shape(seen, snap)


def _snapshot_shape(seen: Observed, snap: KVSnapshot) -> list[str]:
    cfg = seen.result.config
    out = []
    if (snap.block_size, snap.num_blocks) != (cfg.block_size, cfg.num_gpu_blocks):
        out.append(
            f"snapshot block_size {snap.block_size}, num_blocks {snap.num_blocks}; the "
            f"config says {cfg.block_size}, {cfg.num_gpu_blocks}"
        )
    shape = tuple(snap.ref_cnt().shape)
    if shape != (snap.num_blocks,):
        out.append(f"ref_cnt() has shape {shape}, expected ({snap.num_blocks},)")
    return out


# -- the prefix cache ---------------------------------------------------------------------


def _prefix_hit(lay: Layout) -> tuple[TraceRequest, ...]:
    shared = lay.tokens(100, 2 * lay.bs)
    return (
        _req("r0", shared + lay.tokens(500, lay.bs + 2), 2),
        _req("r1", shared + lay.tokens(700, lay.bs + 1), 2, LATER_S),
    )


def _expect_prefix_hit(seen: Observed) -> list[str]:
    first = seen.first("r1")
    if first is None:
        return ["r1 was never scheduled"]
    seen.notes.append(f"r1 cached {first.num_cached_tokens} tokens")
    out = []
    if first.num_cached_tokens == 0:
        out.append(
            "r1 admitted with num_cached_tokens 0, expected a prefix hit: its first 2 "
            "blocks equal finished r0's (prefix caching on)"
        )
    return out + _all_outputs(seen, {"r0": 2, "r1": 2})


def _full_hit(lay: Layout) -> tuple[TraceRequest, ...]:
    prompt = lay.tokens(100, 2 * lay.bs)
    return (_req("r0", prompt, 2), _req("r1", prompt, 2, LATER_S))


def _expect_full_hit(seen: Observed) -> list[str]:
    first = seen.first("r1")
    if first is None:
        return ["r1 was never scheduled"]
    seen.notes.append(f"r1 cached {first.num_cached_tokens} of {first.num_tokens} tokens")
    out = []
    if first.num_cached_tokens == 0:
        out.append(
            "r1 (r0's prompt again) admitted with num_cached_tokens 0, expected a prefix hit"
        )
    return out + _all_outputs(seen, {"r0": 2, "r1": 2})


def _cache_salt(lay: Layout) -> tuple[TraceRequest, ...]:
    prompt = lay.tokens(100, 3 * lay.bs)
    return (
        _req("r0", prompt, 2, cache_salt="a"),
        _req("r1", prompt, 2, LATER_S, cache_salt="b"),
    )


def _expect_cache_salt(seen: Observed) -> list[str]:
    first = seen.first("r1")
    if first is None:
        return ["r1 was never scheduled"]
    out = []
    if first.num_cached_tokens:
        out.append(
            f"r1 (salt 'b') hit {first.num_cached_tokens} tokens of r0's KV (salt 'a'); "
            "expected no hit across salts"
        )
    return out + _all_outputs(seen, {"r0": 2, "r1": 2})


# -- pressure: preemption, aborts, rejection ----------------------------------------------


def _two_long(lay: Layout) -> tuple[TraceRequest, ...]:
    return (
        _req("r0", lay.tokens(100, 2 * lay.bs + 1), 8),
        _req("r1", lay.tokens(300, 2 * lay.bs + 1), 8),
    )


def _one_fits(lay: Layout, cfg: EngineConfig) -> dict[str, Any]:
    """Blocks for one request alone (prompt + outputs), plus one: two cannot both grow."""
    return {"num_gpu_blocks": -(-(2 * lay.bs + 1 + 8) // lay.bs) + 1}


def _expect_preemption(seen: Observed) -> list[str]:
    preempted = sorted({rid for o in seen.result.schedule for rid in o.preempted_req_ids})
    seen.notes.append(f"preempted {preempted or 'none'}")
    return _all_outputs(seen, {"r0": 8, "r1": 8})


def _abort(lay: Layout) -> tuple[TraceRequest, ...]:
    """r0 is aborted between its second and third chunk; r1, as large, needs every block."""
    return (
        _req("r0", lay.tokens(100, 4 * lay.budget), 2, abort_time_s=0.015),
        _req("r1", lay.tokens(300, 4 * lay.budget), 2, LATER_S),
    )


def _whole_cache(lay: Layout, cfg: EngineConfig) -> dict[str, Any]:
    return {"num_gpu_blocks": -(-(4 * lay.budget + 2) // lay.bs)}


def _expect_abort(seen: Observed) -> list[str]:
    out = []
    if seen.result.aborted != 1:
        out.append(f"{seen.result.aborted} requests aborted, expected r0")
    computed = sum(c.num_scheduled_tokens for c in seen.chunks("r0"))
    seen.notes.append(f"r0 ran {computed} tokens before its abort")
    if computed >= seen.layout.budget * 4:
        out.append("r0 was prefilled whole before its abort; the scenario needs mid-chunk")
    return out + _all_outputs(seen, {"r1": 2})


def _oversize(lay: Layout) -> tuple[TraceRequest, ...]:
    return (
        _req("r0", lay.tokens(100, 6 * lay.bs), 2),
        _req("r1", lay.tokens(300, lay.bs), 2, 0.01),
    )


def _small_cache(lay: Layout, cfg: EngineConfig) -> dict[str, Any]:
    return {"num_gpu_blocks": 4}


def _expect_rejection(seen: Observed) -> list[str]:
    rejected = [rid for o in seen.result.schedule for rid in o.rejected_req_ids]
    out = []
    if rejected != ["r0"]:
        out.append(f"rejected {rejected}; expected ['r0'] (its prompt alone needs 6 blocks)")
    return out + _all_outputs(seen, {"r1": 2})


def _later_turn(lay: Layout) -> tuple[TraceRequest, ...]:
    return (
        _req("r0", lay.tokens(100, 2 * lay.bs + 1), 3),
        _req("r1", lay.tokens(700, lay.bs), 2, parent_request_id="r0"),
    )


def _expect_later_turn(seen: Observed) -> list[str]:
    first = seen.first("r1")
    if first is None:
        return ["r1 (a later turn of r0) was never scheduled"]
    want = 2 * seen.layout.bs + 1 + 3 + seen.layout.bs
    out = []
    if first.num_prompt_tokens != want:
        out.append(
            f"r1's prompt has {first.num_prompt_tokens} tokens; expected {want} (r0's prompt"
            " and outputs, then its own)"
        )
    seen.notes.append(f"r1 cached {first.num_cached_tokens} tokens of its history")
    return out + _all_outputs(seen, {"r0": 3, "r1": 2})


CHECKS: tuple[Check, ...] = (
    Check("admission", _admission, _expect_admission),
    Check(
        "chunked-prefill",
        _chunked,
        _expect_chunked,
        _needs_on("enable_chunked_prefill"),
        chunked=True,
    ),
    Check("prefix-hit", _prefix_hit, _expect_prefix_hit, _needs_on("enable_prefix_caching")),
    Check("full-hit", _full_hit, _expect_full_hit, _needs_on("enable_prefix_caching")),
    Check("cache-salt", _cache_salt, _expect_cache_salt, _needs("cache_salt", "cache_salt")),
    Check("preemption", _two_long, _expect_preemption, config=_one_fits),
    Check(
        "abort-mid-chunk",
        _abort,
        _expect_abort,
        _needs_aborts_mid_chunk,
        _whole_cache,
        chunked=True,
    ),
    Check(
        "rejection",
        _oversize,
        _expect_rejection,
        _needs("rejects_oversize", "rejection of a request that can never fit"),
        _small_cache,
    ),
    Check("later-turn", _later_turn, _expect_later_turn, _needs("later_turns", "later turns")),
    Check("finish", _finish, _expect_finish),
)
