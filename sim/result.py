"""What a run is given (SimOptions) and what it gives back (RunResult), exit codes, and the
two kinds of crash: the engine under test's (EngineCrash, `call_engine`) and the harness's."""

from __future__ import annotations

import dataclasses
import traceback
from array import array
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from schedcheck.engines.protocol import EngineConfig, SchedulerOutput
from schedcheck.invariants.violation import Violation
from schedcheck.sim.blame import crash_violation
from schedcheck.sim.cost_model import StepCostModel
from schedcheck.sim.faults import check_faults
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE, FIRST_TOKEN_ID

EXIT_CLEAN, EXIT_VIOLATION, EXIT_USAGE, EXIT_LIVENESS = 0, 1, 2, 3
T = TypeVar("T")


@dataclass(frozen=True)
class SimOptions:
    seed: int = 0
    steps_max: int = 10_000_000
    stall_steps_max: int = 16  # consecutive steps that schedule nothing while work waits
    liveness_steps_max: int = 0  # after the last arrival; 0 = derived from the work left
    # the block pool is checked every step, incrementally (the blocks that changed), and in
    # full at the end; N > 0 adds a full sweep every Nth step (1: every step, the reference)
    pool_check_interval_steps: int = 0
    keep_going: bool = False  # go on after a violating step
    record_schedule: bool = False  # keep every SchedulerOutput (for bundles)
    record_kv_events: bool = False  # keep the engine's block events (sim/kv_events.py)
    check_invariants: bool = True
    vocab_size: int = DEFAULT_VOCAB_SIZE
    # the model's EOS id: a request stops once it samples it (vLLM's FINISHED_STOPPED, reason
    # "stop"); None: EOS is ignored and every request runs to max_tokens (ignore_eos)
    eos_token_id: int | None = None
    executor: str = "symbolic"  # "hash" (bare: no shadow KV) or "tensor" (gpu/, lazily)
    executor_options: Mapping[str, Any] = field(default_factory=dict)
    context_steps: int = 4  # steps of a request quoted in its violations
    faults: Mapping[str, float] = field(default_factory=dict)  # kind -> probability per step
    # invariants or signatures (Violation.signature) of known behaviours: counted, not violations
    ignore: tuple[str, ...] = ()
    progress: bool = False
    # speculative decoding (EngineConfig.num_speculative_tokens > 0): the probability that
    # the drafter proposes the true next token (sim/drafter.py)
    draft_acceptance: float = 0.7

    def __post_init__(self) -> None:
        object.__setattr__(self, "ignore", tuple(self.ignore))  # a list from a bundle's JSON
        check_faults(self.faults)
        assert self.steps_max >= 1 and self.stall_steps_max >= 1 and self.context_steps >= 0
        assert 0.0 <= self.draft_acceptance <= 1.0, "draft_acceptance is a probability"
        eos = self.eos_token_id
        assert eos is None or FIRST_TOKEN_ID <= eos < self.vocab_size, (
            f"eos_token_id {eos} is not a token the model samples [{FIRST_TOKEN_ID}, "
            f"{self.vocab_size})"
        )


class Outputs(MutableMapping[str, list[int]]):
    """Request id -> its output token ids, as a dict of lists reads; each kept as a packed
    array of the narrowest signed integers that hold its ids exactly (2 bytes a token for
    a 32,000-token vocabulary; a list of ints costs about 36 bytes a token: an hour of
    traffic's outputs would be the largest thing a replay keeps). A value read is a new
    list: change one by assigning it again."""

    __slots__ = ("_packed",)

    def __init__(self, items: Mapping[str, list[int]] | None = None) -> None:
        self._packed: dict[str, array[int]] = {}
        if items:
            self.update(items)

    def __getitem__(self, request_id: str) -> list[int]:
        return self._packed[request_id].tolist()

    def __setitem__(self, request_id: str, tokens: list[int]) -> None:
        self._packed[request_id] = array(_typecode(tokens), tokens)

    def __delitem__(self, request_id: str) -> None:
        del self._packed[request_id]

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._packed

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)

    def __repr__(self) -> str:
        return f"Outputs({dict(self.items())!r})"


def _typecode(tokens: list[int]) -> str:
    """The array typecode of the narrowest signed integers holding every token."""
    if not tokens:
        return "h"
    low, high = min(tokens), max(tokens)
    if low >= -(1 << 15) and high < 1 << 15:
        return "h"
    return "i" if low >= -(1 << 31) and high < 1 << 31 else "q"


@dataclass
class RunResult:
    engine: str
    config: EngineConfig
    options: SimOptions
    cost: StepCostModel
    requests: int = 0
    finished: int = 0
    aborted: int = 0
    rejected: int = 0
    steps: int = 0
    sim_time_s: float = 0.0
    wall_time_s: float = 0.0
    violations: list[Violation] = field(default_factory=list)
    stuck: dict[str, str] = field(default_factory=dict)  # liveness failure: id -> reason
    fingerprint: str = ""
    invariants_checked: int = 0
    schedule: list[SchedulerOutput] = field(default_factory=list)
    kv_events: list[dict[str, Any]] = field(default_factory=list)  # record_kv_events
    outputs: Outputs = field(default_factory=Outputs)
    trace: list[TraceRequest] = field(default_factory=list)  # requests read, in file order
    coverage: dict[str, int] = field(default_factory=dict)  # rare path -> times reached
    faults_fired: list[str] = field(default_factory=list)  # "step N: kind: what it did"
    ignored: dict[str, int] = field(default_factory=dict)  # SimOptions.ignore entry -> n matched

    def unignored(self, violations: list[Violation]) -> list[Violation]:
        """The violations not of an ignored invariant or signature (those are only counted)."""
        if not self.options.ignore or not violations:
            return violations
        kept = []
        for v in violations:
            matched = v.invariant if v.invariant in self.options.ignore else v.signature
            if matched in self.options.ignore:
                self.ignored[matched] = self.ignored.get(matched, 0) + 1
            else:
                kept.append(v)
        return kept

    def report(
        self,
        violations: list[Violation],
        sim_time_s: float,
        context: Callable[[str], tuple[str, ...]],
    ) -> bool:
        """Keep the violations not ignored, each with the time and its request's recent
        steps (`context`); True if any was kept."""
        if not violations:  # most steps
            return False
        violations = self.unignored(violations)
        self.violations.extend(
            dataclasses.replace(v, sim_time_s=sim_time_s, context=context(v.request_id))
            for v in violations
        )
        return bool(violations)

    @property
    def exit_code(self) -> int:
        if self.violations:
            return EXIT_VIOLATION
        return EXIT_LIVENESS if self.stuck else EXIT_CLEAN

    def summary(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "block_manager": self.config.block_manager,
            "mutant": self.config.mutant,
            "requests": self.requests,
            "finished": self.finished,
            "aborted": self.aborted,
            "rejected": self.rejected,
            "steps": self.steps,
            "sim_time_s": round(self.sim_time_s, 6),
            "wall_time_s": round(self.wall_time_s, 3),
            "violations": [v.to_json() for v in self.violations],
            "stuck": dict(self.stuck),
            "fingerprint": self.fingerprint,
            "invariants_checked": self.invariants_checked,
            "coverage": dict(self.coverage),
            "faults_fired": len(self.faults_fired),
            "exit_code": self.exit_code,
        }


class EngineCrash(Exception):
    """A call into the engine raised: the engine's crash, or its adapter's (sim/blame.py
    tells which from the traceback)."""

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(f"{where}: {type(exc).__name__}: {exc}")
        self.where = where
        self.exc = exc
        self.trace = "".join(traceback.format_exception(exc))

    def violation(self, step: int) -> Violation:
        """engine-crash if the engine's own code raised, harness-crash if schedcheck's."""
        return crash_violation(step, self.where, self.exc)


def call_engine(where: str, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, a call into the engine under test (through its adapter) named `where`
    (schedule, ...): whatever it raises is an EngineCrash, blamed by its traceback."""
    try:
        return fn(*args)
    except Exception as exc:
        raise EngineCrash(where, exc) from exc
