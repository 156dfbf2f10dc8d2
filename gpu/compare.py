"""Verify a bundle: replay its schedule on tensors and compare with unchunked execution.

    bundle ─► true sequences (trace prompt resolved + outputs.json)  ─► baseline (dense)
          └─► schedule ─► replay (paged, chunked, shared prefixes)   ─► checks ─► Report

Compared: (a) the greedy token at every position the schedule sampled, (b) the logprob of
the chosen token within the dtype's tolerance, (c) every K/V entry the schedule wrote, and
every one its attention read, position by position. The chunk token ids are compared with
the TRUE sequence, so a schedule that re-prefills wrong tokens shows up at that position.

Verdict: `misaligned` if any divergence is a misalignment, else `near-tie` if any is a
near tie, else `consistent`. `first_divergence` gives each request's first divergence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from schedcheck.gpu.backends import choose_backend
from schedcheck.gpu.backends.base import AttentionBackend, BackendSpec
from schedcheck.gpu.baseline import run_baseline
from schedcheck.gpu.checks import ReplayChecker
from schedcheck.gpu.dtypes import dtype_name, torch_dtype
from schedcheck.gpu.executor import TensorExecutor
from schedcheck.gpu.executor import cpu_threads as cpu_threads  # its callers' import
from schedcheck.gpu.findings import MISALIGNMENT, NEAR_TIE, Finding, first_per_request
from schedcheck.gpu.model import LlamaModel, ModelConfig, make_model
from schedcheck.gpu.replay import Transform, replay_schedule
from schedcheck.gpu.sequences import (
    check_vocab,
    extend_from_schedule,
    read_trace,
    true_sequences,
)
from schedcheck.gpu.tolerances import Tolerance, tolerance_for
from schedcheck.traces.bundle import read_bundle

MAX_DIVERGENCES_PER_REQUEST = 20


@dataclass
class Report:
    bundle: str
    backend: str
    device: str
    dtype: str
    steps: int
    requests: int
    tokens: int
    sampled: int
    findings: list[Finding]
    timing_s: dict[str, float]
    violations: list[dict[str, Any]] = field(default_factory=list)
    max_kv_error: float = 0.0
    max_logprob_error: float = 0.0

    @property
    def verdict(self) -> str:
        classes = {f.cls for f in self.findings}
        if MISALIGNMENT in classes:
            return "misaligned"
        return "near-tie" if NEAR_TIE in classes else "consistent"

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == "misaligned" else 0

    def first_divergence(self) -> dict[str, Finding]:
        return first_per_request(self.findings)

    def to_json(self) -> dict[str, Any]:
        kept, dropped = _cap(self.findings)
        first = self.first_divergence()
        return {
            "bundle": self.bundle,
            "backend": self.backend,
            "device": self.device,
            "dtype": self.dtype,
            "verdict": self.verdict,
            "steps": self.steps,
            "requests": self.requests,
            "tokens": self.tokens,
            "sampled": self.sampled,
            "first_divergence": {r: f.to_json() for r, f in first.items()},
            "divergences": [f.to_json() for f in kept],
            "num_divergences": len(self.findings),
            "divergences_left_out": dropped,
            "violations_matched": match_violations(self.violations, first),
            "max_kv_error_within_tolerance": self.max_kv_error,
            "max_logprob_error_within_tolerance": self.max_logprob_error,
            "timing_s": self.timing_s,
        }


def _cap(findings: list[Finding]) -> tuple[list[Finding], int]:
    """At most MAX_DIVERGENCES_PER_REQUEST per request, in sort order."""
    kept, count = [], dict[str, int]()
    for finding in sorted(findings, key=Finding.sort_key):
        n = count.get(finding.request_id, 0)
        count[finding.request_id] = n + 1
        if n < MAX_DIVERGENCES_PER_REQUEST:
            kept.append(finding)
    return kept, len(findings) - len(kept)


def match_violations(
    violations: list[dict[str, Any]], first: dict[str, Finding]
) -> list[dict[str, Any]]:
    """For each recorded violation naming a request: does our first divergence agree?"""
    out = []
    for v in violations:
        rid = v.get("request_id")
        if rid is None:
            continue
        ours = first.get(str(rid))
        out.append(
            {
                "request_id": rid,
                "step": v.get("step"),
                "position": v.get("position"),
                "found": ours.to_json() if ours else None,
                "same_position": ours is not None and ours.position == v.get("position"),
            }
        )
    return out


@dataclass(frozen=True)
class VerifyOptions:
    backend: str = "torch-ref"
    device: str = "cpu"
    dtype: str = "fp32"
    seed: int = 0
    model_dir: str | None = None
    model_config: ModelConfig | None = None
    tolerance: Tolerance | None = None
    transform: Transform | None = None  # tests: rewrite each step's metadata
    model_hook: Callable[[LlamaModel], None] | None = None  # tests: edit weights


def build_model(opts: VerifyOptions) -> LlamaModel:
    dtype = torch_dtype(opts.dtype)
    if opts.model_dir is not None:
        from schedcheck.gpu.weights import load_model

        return load_model(opts.model_dir, device=opts.device, dtype=dtype)
    return make_model(opts.model_config, seed=opts.seed, device=opts.device, dtype=dtype)


def verify_bundle(
    path: str | Path,
    opts: VerifyOptions,
    model: LlamaModel | None = None,
    backend: AttentionBackend | None = None,
) -> Report:
    """Replay bundle `path` and compare; raises ValueError on a bad bundle or config.

    `model` / `backend` instances override opts (a backend given is not checked)."""
    bundle = read_bundle(path)
    engine_cfg = bundle.config.get("engine_config", {})
    block_size = int(engine_cfg.get("block_size", 16))
    num_blocks = int(engine_cfg.get("num_gpu_blocks", 27_000))
    model = model or build_model(opts)
    if opts.model_hook is not None:
        opts.model_hook(model)
    schedule = list(bundle.schedule())
    recorded = true_sequences(
        read_trace(bundle.trace_path), bundle.outputs, vocab_size=model.cfg.vocab_size
    )
    sequences = extend_from_schedule(recorded, schedule)
    check_vocab(sequences, model.cfg.vocab_size)
    cfg = model.cfg
    spec = BackendSpec.for_device(
        model.device,
        dtype=model.dtype,
        block_size=block_size,
        head_dim=cfg.head_dim,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
    )
    backend = backend or choose_backend(opts.backend, spec)
    start = time.perf_counter()
    baseline = run_baseline(model, backend, sequences)
    _sync(model.device)
    baseline_s = time.perf_counter() - start
    tolerance = opts.tolerance or tolerance_for(dtype_name(model.dtype))
    checker = ReplayChecker(baseline, model, tolerance, (num_blocks + 1) * block_size)
    executor = TensorExecutor(model, backend, block_size, num_blocks, observer=checker)
    executor.set_true_tokens(sequences)
    stats = replay_schedule(
        schedule,
        executor,
        block_size,
        bundle.config.get("mutant"),
        opts.transform,
        num_lookahead_tokens=int(engine_cfg.get("num_lookahead_tokens", 0)),
        max_model_len=engine_cfg.get("max_model_len"),
    )
    return Report(
        bundle=str(path),
        backend=backend.name,
        device=str(model.device),
        dtype=dtype_name(model.dtype),
        steps=stats.steps,
        requests=len(sequences),
        tokens=stats.tokens,
        sampled=stats.sampled,
        findings=executor.findings + checker.findings,
        timing_s={"baseline": baseline_s, "replay": stats.replay_s, "forward": executor.forward_s},
        violations=list(bundle.violations),
        max_kv_error=checker.max_kv_error,
        max_logprob_error=checker.max_logprob_error,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
