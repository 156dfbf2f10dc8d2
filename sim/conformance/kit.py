"""Run the kit's checks against one engine and judge each: pass, fail (one line per broken
expectation or violation), or skip (what the engine does not declare).

Each check runs on a small config fitted to the engine: block size 4 (or the smallest the
engine accepts), a budget of 2 blocks a step (every prompt at once where the engine runs
only without chunked prefill), prefix caching on where the engine has it, the engine's
spare blocks on top of what a check sizes, the `unit` step cost (10 ms a step).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from schedcheck.engines.capabilities import Capabilities, EngineRefusal, config_refusals
from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.registry import capabilities
from schedcheck.sim.blame import build_engine
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.conformance.checks import CHECKS, Check, Layout, Observed
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, Simulation

PASS, FAIL, SKIP = "pass", "fail", "skip"
NUM_GPU_BLOCKS = 64  # checks that size no cache: room for everything
STEPS_MAX = 2_000
UNCHUNKED_BUDGET_BLOCKS = 16  # without chunked prefill: every prompt of the kit in one step


@dataclass
class CheckResult:
    name: str
    status: str
    lines: list[str] = field(default_factory=list)  # what failed, or why skipped
    notes: list[str] = field(default_factory=list)  # what was observed
    bundle: str | None = None

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def layout(caps: Capabilities) -> Layout:
    accepted = [b for b in (4, *sorted(caps.block_sizes or ())) if caps.accepts_block_size(b)]
    bs = accepted[0]
    return Layout(bs=bs, budget=2 * bs)


def base_config(caps: Capabilities, lay: Layout, block_manager: str | None) -> EngineConfig:
    chunked = True in caps.enable_chunked_prefill
    return EngineConfig(
        block_size=lay.bs,
        num_gpu_blocks=NUM_GPU_BLOCKS,
        max_num_batched_tokens=lay.budget if chunked else UNCHUNKED_BUDGET_BLOCKS * lay.bs,
        max_num_seqs=8,
        max_model_len=64 * lay.bs,
        enable_prefix_caching=True in caps.enable_prefix_caching,
        enable_chunked_prefill=chunked,
        block_manager=block_manager or caps.block_managers[0],
    )


def run_kit(
    engine: str, block_manager: str | None = None, out_dir: str | None = None
) -> list[CheckResult]:
    """Every check against `engine`, in the kit's order. Raises EngineLoadError (bad
    engine) or ValueError (a block manager the engine does not declare)."""
    caps = capabilities(engine)
    lay = layout(caps)
    base = base_config(caps, lay, block_manager)
    refusals = config_refusals(caps, base)
    if refusals:
        raise ValueError(f"engine {engine} does not support {'; '.join(refusals)}")
    # one setup error, not a FAIL per check, when the engine cannot be built at all; a
    # refusal of this config is not one (each check fits its own)
    with contextlib.suppress(EngineRefusal):
        build_engine(engine, caps.fit(base))
    return [run_check(check, engine, caps, lay, base, out_dir) for check in CHECKS]


def fitted(check: Check, caps: Capabilities, lay: Layout, base: EngineConfig) -> EngineConfig:
    """The check's config as the engine accepts it, plus its spare blocks; if the engine's
    fit_config turned chunked prefill off, a budget every prompt of the kit fits in."""
    raw = dataclasses.replace(base, **check.config(lay, base))
    raw = dataclasses.replace(raw, num_gpu_blocks=raw.num_gpu_blocks + caps.spare_blocks)
    config = caps.fit(raw)
    budget = UNCHUNKED_BUDGET_BLOCKS * lay.bs
    if not config.enable_chunked_prefill and config.max_num_batched_tokens < budget:
        # fitted again from the drawn config: a fitter may derive max_model_len from the budget
        config = caps.fit(dataclasses.replace(raw, max_num_batched_tokens=budget))
    return config


def run_check(
    check: Check,
    engine: str,
    caps: Capabilities,
    lay: Layout,
    base: EngineConfig,
    out_dir: str | None,
) -> CheckResult:
    why = check.skip(caps)
    if why is not None:
        return CheckResult(check.name, SKIP, [why])
    config = fitted(check, caps, lay, base)
    if check.chunked and not config.enable_chunked_prefill:
        config = fitted(check, caps, lay, dataclasses.replace(base, enable_prefix_caching=False))
        if not config.enable_chunked_prefill:
            return CheckResult(
                check.name, SKIP, ["the engine's fit_config turns chunked prefill off"]
            )
    options = SimOptions(steps_max=STEPS_MAX, record_schedule=True)
    try:
        sim = Simulation(check.requests(lay), engine, config, options, profile("unit"))
        result = sim.run()
        snapshot = sim.engine.kv_snapshot()
    except Exception as exc:  # the engine refused its config, or raised outside a step
        return CheckResult(check.name, FAIL, [f"the engine raised {type(exc).__name__}: {exc}"])
    seen = Observed(result, snapshot, lay)
    lines = [v.headline() for v in result.violations]
    lines += [f"stuck {rid}: {why}" for rid, why in sorted(result.stuck.items())]
    if not lines:  # a run cut short by a violation says nothing more
        lines = check.expect(seen)
    outcome = CheckResult(check.name, FAIL if lines else PASS, lines, seen.notes)
    if lines and out_dir is not None:
        outcome.bundle = str(save_bundle(Path(out_dir) / check.name, result))
    return outcome
