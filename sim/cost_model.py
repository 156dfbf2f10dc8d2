"""Step cost model: how much simulated time one engine step takes.

A documented linear model of one forward pass on one GPU::

    step_time_us = fixed_us                                  (weights read, launch, sampling)
                 + prefill_token_us  * prefill tokens        (rows of chunks that do not sample)
                 + decode_request_us * sampling rows         (decodes and last prefill rows)
                 + context_token_us  * sum(seq_lens)         (KV read by attention)

Simulated time depends only on the schedule, never on wall time. Coefficients come from a
named profile and can be overridden one by one (`--cost fixed_us=4000,...`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata


@dataclass(frozen=True, slots=True)
class StepCostModel:
    name: str
    fixed_us: float
    prefill_token_us: float
    decode_request_us: float
    context_token_us: float

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self)[1:]:
            assert getattr(self, f.name) >= 0, f"{f.name} must be >= 0"

    def step_time_us(self, meta: RunnerMetadata) -> float:
        num_sampling = int(meta.logits_indices.size)
        num_prefill = meta.num_tokens - num_sampling
        # the KV read: summed only where it costs time (not under `unit`, the fuzzer's)
        num_context = int(np.add.reduce(meta.seq_lens)) if self.context_token_us else 0
        return (
            self.fixed_us
            + self.prefill_token_us * num_prefill
            + self.decode_request_us * num_sampling
            + self.context_token_us * num_context
        )

    def with_overrides(self, spec: str) -> StepCostModel:
        """Apply `name=value,...` overrides; raises ValueError naming a bad one."""
        values: dict[str, float] = {}
        names = {f.name for f in dataclasses.fields(self)} - {"name"}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, raw = item.partition("=")
            if not sep or key not in names:
                raise ValueError(
                    f"cost override {item!r}: use NAME=VALUE with NAME in "
                    f"{', '.join(sorted(names))}"
                )
            try:
                values[key] = float(raw)
            except ValueError:
                raise ValueError(f"cost override {item!r}: {raw!r} is not a number") from None
            if values[key] < 0:
                raise ValueError(f"cost override {item!r}: must be >= 0")
        return dataclasses.replace(
            self, name=f"{self.name}+overrides" if values else self.name, **values
        )


# Llama-3.1-8B in bf16 on one H100 80GB (SXM): decode is bound by reading 16 GB of weights
# at ~3.3 TB/s (~5 ms); prefill by ~16 GFLOP per token at ~550 TFLOP/s sustained (~30 us);
# attention reads 128 KiB of KV per context token (~0.04 us).
PROFILES: dict[str, StepCostModel] = {
    "llama3-8b-h100": StepCostModel("llama3-8b-h100", 5_000.0, 30.0, 30.0, 0.04),
    # Llama-3.1-70B in bf16 on 8 x H100 (tensor parallel 8): ~2.2x the per-token work.
    "llama3-70b-8xh100": StepCostModel("llama3-70b-8xh100", 9_000.0, 65.0, 65.0, 0.02),
    # A fixed cost per step: handy for tests and for reasoning about interleavings.
    "unit": StepCostModel("unit", 10_000.0, 0.0, 0.0, 0.0),
}


def profile(name: str) -> StepCostModel:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown cost profile {name!r}: use one of {', '.join(sorted(PROFILES))}"
        ) from None
