"""Tensor replay: a real model, a paged KV cache and attention kernels (issue 7).

Importing `schedcheck.gpu` imports nothing else: torch is needed only by the modules that
use it (model, kv_cache, backends, executor, baseline, checks, compare, replay, nightly),
so the CPU simulator never pays for it. The pure modules (`findings`, `sequences`,
`step_plan`, `tolerances`, `scenarios`) need numpy only.

    bundle ──► sequences (true tokens) ──► baseline (each request alone, dense causal)
       │                                          │
       └─► schedule ──► step_plan ──► executor (paged KV, backend) ──► checks ──► compare
"""
