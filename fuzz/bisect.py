"""Which release broke a schedule, which fixed it: one bundle replayed in each release's env.

    bundle B (recorded failing as kind K in some release)
      release r1 < r2 < ... (each its own venv: .tox/vllm-v0.5.4, .tox/vllm-v1-0.34.0, ...)
        PYTHON_r -m schedcheck.cli replay --bundle B --json   ──► an Outcome per release
    the outcomes in release order ──► a Verdict:

      present      every release that runs it fails as K
      introduced   clean up to some release, failing as K from the next one on
      fixed        failing as K up to some release, clean from the next one on
      changed      a release fails as another kind (the code under test moved)
      mixed        clean and failing alternate more than once
      absent       every release that runs it is clean
      not-run      no release could run it (refused, no env)

A release "refuses" a bundle when its adapter or vLLM's own config checks reject the
bundle's config (exit 2): e.g. a v0 bundle in a v1-only release. Refusals and missing envs
are reported and left out of the verdict.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from schedcheck.engines.vllm.v1.eras import NEWEST

REPLAY_TIMEOUT_S = 900  # one release's replay of one bundle; a shrunk bundle takes seconds
CLEAN, REFUSED, NO_ENV, ERROR = "clean", "refused", "no-env", "error"


@dataclass(frozen=True)
class Outcome:
    release: str
    status: str  # clean | an invariant kind | liveness | refused | no-env | error
    headline: str = ""

    @property
    def ran(self) -> bool:
        return self.status not in (REFUSED, NO_ENV, ERROR)


@dataclass(frozen=True)
class Verdict:
    kind: str  # present | introduced | fixed | changed | mixed | absent | not-run
    words: str  # the verdict in one sentence
    last_good: str | None = None  # the last release before the change
    first_bad: str | None = None  # the first release after it


def release_key(release: str) -> tuple[int, ...]:
    """`0.10.1.1` -> (0, 10, 1, 1): releases sort numerically, not as text."""
    parts = release.split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"{release!r} is not a release number like 0.6.0 or 0.10.1.1")
    return tuple(int(p) for p in parts)


# the release tox's plain `vllm-v1` env holds (CI's): the newest the v1 adapter knows
NEWEST_V1 = NEWEST


def tox_env(release: str) -> str:
    """The tox env that holds `release`: vllm-v0.5.4 / vllm-v0.6.0 (v0), vllm-v1-RELEASE
    for every v1 release (the newest is in `vllm-v1` too: `env_python`)."""
    if release_key(release) < (0, 7):
        return f"vllm-v{release}"
    return f"vllm-v1-{release}"


def env_python(tox_dir: Path, release: str) -> Path:
    """The Python of `release`'s env under tox_dir: its own tox env, else, for the newest
    v1 release, CI's `vllm-v1` where only that one is built."""
    python = tox_dir / tox_env(release) / "bin" / "python"
    plain = tox_dir / "vllm-v1" / "bin" / "python"
    if not python.exists() and release == NEWEST_V1 and plain.exists():
        return plain
    return python


def classify(outcomes: Sequence[Outcome], recorded_kind: str) -> Verdict:
    """The verdict of the outcomes (in release order) for a bundle recorded as `recorded_kind`."""
    ran = [o for o in outcomes if o.ran]
    if not ran:
        return Verdict("not-run", "no release could run the bundle")
    other = [o for o in ran if o.status not in (CLEAN, recorded_kind)]
    if other:
        names = ", ".join(f"{o.release} ({o.status})" for o in other)
        return Verdict("changed", f"fails otherwise than {recorded_kind} in {names}")
    fails = [o.status == recorded_kind for o in ran]
    if all(fails):
        return Verdict("present", f"{recorded_kind} in every release run")
    if not any(fails):
        return Verdict("absent", "clean in every release run")
    flips = [i for i in range(1, len(ran)) if fails[i] != fails[i - 1]]
    if len(flips) > 1:
        pattern = ", ".join(
            f"{o.release} {'fails' if f else 'clean'}" for o, f in zip(ran, fails, strict=True)
        )
        return Verdict("mixed", f"clean and failing alternate: {pattern}")
    before, after = ran[flips[0] - 1], ran[flips[0]]
    if fails[0]:
        words = f"fixed in {after.release} (last failing: {before.release})"
        return Verdict("fixed", words, before.release, after.release)
    words = f"introduced in {after.release} (last clean: {before.release})"
    return Verdict("introduced", words, before.release, after.release)


def outcome_of(release: str, exit_code: int, stdout: str, stderr: str) -> Outcome:
    """What one release's `replay --bundle --json` says."""
    if exit_code == 2:
        return Outcome(release, REFUSED, _last_line(stderr))
    try:
        summary = json.loads(stdout)
    except json.JSONDecodeError:
        return Outcome(release, ERROR, f"exit {exit_code}: {_last_line(stderr)}")
    if summary.get("violations"):
        first = summary["violations"][0]
        return Outcome(release, first["invariant"], first.get("message", ""))
    if summary.get("stuck"):
        rid, why = sorted(summary["stuck"].items())[0]
        return Outcome(release, "liveness", f"{rid}: {why}")
    return Outcome(release, CLEAN)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_release(release: str, python: Path | None, bundle: Path) -> Outcome:
    """Replay `bundle` with `python` (the release's env); NO_ENV if there is none."""
    if python is None or not python.exists():
        return Outcome(release, NO_ENV, f"no env for {release} (tox -e {tox_env(release)})")
    command = [str(python), "-m", "schedcheck.cli", "replay", "--bundle", str(bundle), "--json"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=REPLAY_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return Outcome(release, ERROR, f"timed out after {REPLAY_TIMEOUT_S} s")
    return outcome_of(release, done.returncode, done.stdout, done.stderr)


def recorded_kind(bundle: Path) -> str:
    """The first violation kind the bundle was recorded with ('liveness' if it got stuck)."""
    violations = json.loads((bundle / "violations.json").read_text(encoding="utf-8"))
    if violations:
        return str(violations[0]["invariant"])
    summary = json.loads((bundle / "summary.json").read_text(encoding="utf-8"))
    if summary.get("stuck"):
        return "liveness"
    raise ValueError(f"{bundle}: the bundle records no finding; nothing to bisect")


def report(bundle: Path, outcomes: Sequence[Outcome], verdict: Verdict) -> dict[str, object]:
    return {
        "bundle": str(bundle),
        "recorded_kind": recorded_kind(bundle),
        "releases": [asdict(o) for o in outcomes],
        "verdict": asdict(verdict),
    }
