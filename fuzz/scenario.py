"""One fuzz example: a trace, an engine config, fault probabilities and a seed, run as one.

The trace runs on the `unit` cost profile (10 ms a step, whatever it computes), so a
trace's ticks (strategies.TICK_S) are quarter steps and an example's meaning does not
depend on token counts. A scenario is plain data: `to_json` / `from_json` carry it between
worker processes and into the failure database, the same bytes for the same scenario.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from schedcheck.engines.protocol import EngineConfig
from schedcheck.fuzz import mutator_groups
from schedcheck.fuzz.draws import LeafDraw, keep_draws_local_free
from schedcheck.fuzz.strategies import BOOLEANS, draw_plans, integers, materialize
from schedcheck.fuzz.swarm import (
    SwarmSpec,
    budget_for_unchunked,
    draw_eos,
    draw_faults,
    draw_features_for,
    draw_knobs,
    draw_max_model_len,
    draw_num_gpu_blocks,
    engine_config,
)
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import RunResult, SimOptions, run
from schedcheck.traces import request_to_json
from schedcheck.traces.reader import read_trace_lines
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE

COST_PROFILE = "unit"
STEPS_MAX = 20_000  # far above what a 12-request example needs; a clean run never hits it
SIM_SEED_MAX = 2**16 - 1


@dataclass(frozen=True, slots=True)
class Scenario:
    engine: str
    requests: tuple[TraceRequest, ...]
    config: EngineConfig
    faults: tuple[tuple[str, float], ...] = ()  # (kind, probability), FAULT_KINDS order
    seed: int = 0  # the run's SimOptions.seed (its fault generator)
    ignore: tuple[str, ...] = ()  # SimOptions.ignore: invariants of known behaviours
    draft_acceptance: float = 0.7  # SimOptions.draft_acceptance (with scheduled drafts)
    vocab_size: int = DEFAULT_VOCAB_SIZE  # SimOptions': the model's, with its EOS
    eos_token_id: int | None = None  # SimOptions': None, EOS ignored

    def __post_init__(self) -> None:
        assert self.requests, "a scenario has at least one request"

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    def with_requests(self, requests: tuple[TraceRequest, ...]) -> Scenario:
        return dataclasses.replace(self, requests=requests)

    def with_config(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **changes))

    def with_mutant(self, mutant: str | None) -> Scenario:
        return dataclasses.replace(self, config=dataclasses.replace(self.config, mutant=mutant))

    def options(self, record_schedule: bool = False) -> SimOptions:
        return SimOptions(
            seed=self.seed,
            steps_max=STEPS_MAX,
            faults=dict(self.faults),
            record_schedule=record_schedule,
            ignore=self.ignore,
            draft_acceptance=self.draft_acceptance,
            vocab_size=self.vocab_size,
            eos_token_id=self.eos_token_id,
        )

    def run(self, record_schedule: bool = False) -> RunResult:
        return run(
            self.requests,
            self.engine,
            self.config,
            self.options(record_schedule),
            profile(COST_PROFILE),
        )

    def to_json(self) -> dict[str, Any]:
        config = dataclasses.asdict(self.config)
        config["extra"] = dict(self.config.extra)
        obj = {
            "engine": self.engine,
            "requests": [request_to_json(r) for r in self.requests],
            "config": config,
            "faults": [list(kv) for kv in self.faults],
            "seed": self.seed,
        }
        if self.ignore:  # absent when empty: older scenarios keep their bytes
            obj["ignore"] = list(self.ignore)
        if self.config.num_speculative_tokens:  # likewise
            obj["draft_acceptance"] = self.draft_acceptance
        if self.eos_token_id is not None:  # likewise
            obj["vocab_size"], obj["eos_token_id"] = self.vocab_size, self.eos_token_id
        return obj

    def dumps(self) -> str:
        """Canonical JSON (sorted keys, compact): equal scenarios give equal text."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json_text(cls, text: str) -> Scenario:
        return cls.from_json(json.loads(text))

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Scenario:
        lines = (json.dumps(r) for r in obj["requests"])
        requests = tuple(read_trace_lines(lines, "<scenario>"))
        return cls(
            engine=obj["engine"],
            requests=requests,
            config=EngineConfig(**obj["config"]),
            faults=tuple((str(k), float(p)) for k, p in obj["faults"]),
            seed=int(obj["seed"]),
            ignore=tuple(str(name) for name in obj.get("ignore", ())),
            draft_acceptance=float(obj.get("draft_acceptance", 0.7)),
            vocab_size=int(obj.get("vocab_size", DEFAULT_VOCAB_SIZE)),
            eos_token_id=None if obj.get("eos_token_id") is None else int(obj["eos_token_id"]),
        )


def scenarios(spec: SwarmSpec) -> st.SearchStrategy[Scenario]:
    """Scenarios for `spec`, drawn alike in every process (fuzz/draws.py); Hypothesis'
    mutations of them found in one pass (fuzz/mutator_groups.py)."""
    keep_draws_local_free()
    mutator_groups.install()
    return _scenarios(spec)


@st.composite
def _scenarios(draw: st.DrawFn, spec: SwarmSpec) -> Scenario:
    """A scenario for `spec`: the config knobs first, then a trace that fits them."""
    draw = LeafDraw(draw)  # the same draws, cheaper (fuzz/draws.py)
    knob = draw_knobs(draw, spec)
    features = draw_features_for(draw, knob, spec)
    plans = draw_plans(draw, knob.block_size, knob.max_num_batched_tokens, features)
    requests = materialize(plans)
    budget_tokens = knob.max_num_batched_tokens
    if not knob.enable_chunked_prefill and draw(BOOLEANS):
        budget_tokens = budget_for_unchunked(knob, requests)
    blocks = draw_num_gpu_blocks(draw, spec, requests, knob)
    faults, seed = draw_faults(draw, spec), draw(integers(0, SIM_SEED_MAX))
    vocab_size, eos_token_id = draw_eos(draw, spec)  # last: earlier draws are as they were
    max_model_len = draw_max_model_len(draw, spec, requests)
    return Scenario(
        engine=spec.engine,
        requests=requests,
        config=engine_config(spec, knob, blocks, budget_tokens, max_model_len),
        faults=faults,
        seed=seed,
        ignore=spec.ignore,
        draft_acceptance=knob.draft_acceptance,
        vocab_size=vocab_size,
        eos_token_id=eos_token_id,
    )
