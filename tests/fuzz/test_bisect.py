"""`schedcheck bisect`: the verdict classes on recorded outcomes, what a release's replay
says, and the command over fake release envs (no vLLM needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schedcheck.fuzz.bisect import Outcome, Verdict, classify, outcome_of, release_key, tox_env

REPO = Path(__file__).resolve().parents[2]
CRASH_BUNDLE = REPO / "tests/vllm/bundles/0.5.4-bm2-engine-crash"
K = "shadow-kv.read"


def _o(*pairs: tuple[str, str]) -> list[Outcome]:
    return [Outcome(release, status) for release, status in pairs]


@pytest.mark.parametrize(
    ("outcomes", "verdict"),
    [
        (_o(("0.5.4", K), ("0.6.0", K)), Verdict("present", f"{K} in every release run")),
        (
            _o(("0.5.4", "clean"), ("0.6.0", K), ("0.33.0", K)),
            Verdict("introduced", "introduced in 0.6.0 (last clean: 0.5.4)", "0.5.4", "0.6.0"),
        ),
        (
            _o(("0.5.4", K), ("0.6.0", "refused"), ("0.10.1.1", K), ("0.33.0", "clean")),
            Verdict("fixed", "fixed in 0.33.0 (last failing: 0.10.1.1)", "0.10.1.1", "0.33.0"),
        ),
        (
            _o(("0.5.4", K), ("0.6.0", "clean"), ("0.33.0", K)),
            Verdict("mixed", "clean and failing alternate: 0.5.4 fails, 0.6.0 clean, 0.33.0 fails"),
        ),
        (
            _o(("0.5.4", K), ("0.6.0", "engine-crash")),
            Verdict("changed", f"fails otherwise than {K} in 0.6.0 (engine-crash)"),
        ),
        (
            _o(("0.5.4", "clean"), ("0.6.0", "clean")),
            Verdict("absent", "clean in every release run"),
        ),
        (
            _o(("0.5.4", "refused"), ("0.6.0", "no-env")),
            Verdict("not-run", "no release could run the bundle"),
        ),
    ],
)
def test_the_verdict_classes(outcomes, verdict):
    assert classify(outcomes, K) == verdict


def test_releases_sort_as_numbers_and_name_their_tox_env():
    assert sorted(["0.33.0", "0.10.1.1", "0.6.0", "0.11.0"], key=release_key) == [
        "0.6.0",
        "0.10.1.1",
        "0.11.0",
        "0.33.0",
    ]
    assert [tox_env(r) for r in ("0.5.4", "0.6.0", "0.11.0", "0.33.0")] == [
        "vllm-v0.5.4",
        "vllm-v0.6.0",
        "vllm-v1-0.11.0",
        "vllm-v1-0.33.0",
    ]
    with pytest.raises(ValueError, match="not a release number"):
        release_key("0.6.x")


def test_what_a_release_replay_says():
    found = json.dumps({"violations": [{"invariant": K, "message": "step 3: ..."}], "stuck": {}})
    assert outcome_of("0.6.0", 1, found, "") == Outcome("0.6.0", K, "step 3: ...")
    stuck = json.dumps({"violations": [], "stuck": {"r1": "waits for blocks"}})
    assert outcome_of("0.6.0", 3, stuck, "") == Outcome("0.6.0", "liveness", "r1: waits for blocks")
    assert outcome_of("0.6.0", 0, json.dumps({"violations": [], "stuck": {}}), "").status == "clean"
    refused = outcome_of("0.33.0", 2, "", "schedcheck: error: cannot import vLLM\n")
    assert refused == Outcome("0.33.0", "refused", "schedcheck: error: cannot import vLLM")
    assert outcome_of("0.6.0", 1, "Traceback ...", "boom\n").status == "error"


def _fake_env(tox_dir: Path, env: str, exit_code: int, summary: dict) -> None:
    """A release env whose python answers `replay --bundle --json` with `summary`."""
    python = tox_dir / env / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(summary)}\nEOF\nexit {exit_code}\n",
        encoding="utf-8",
    )
    python.chmod(0o755)


def test_the_command_over_fake_release_envs(tmp_path):
    crash = {"invariant": "engine-crash", "message": "schedule: IndexError"}
    _fake_env(tmp_path, "vllm-v0.5.4", 1, {"violations": [crash], "stuck": {}})
    _fake_env(tmp_path, "vllm-v0.6.0", 0, {"violations": [], "stuck": {}})
    argv = ["bisect", str(CRASH_BUNDLE), "--json", "--tox-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["recorded_kind"] == "engine-crash"
    assert [(r["release"], r["status"]) for r in report["releases"]] == [
        ("0.5.4", "engine-crash"),
        ("0.6.0", "clean"),
    ]
    assert report["verdict"] == {
        "kind": "fixed",
        "words": "fixed in 0.6.0 (last failing: 0.5.4)",
        "last_good": "0.5.4",
        "first_bad": "0.6.0",
    }


def test_bad_input_is_exit_2(tmp_path):
    for argv in (
        [str(tmp_path)],  # not a bundle
        [str(CRASH_BUNDLE), "--releases", "0.6.x"],
        [str(CRASH_BUNDLE), "--env", "0.6.0"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "schedcheck.cli", "bisect", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, (argv, done.stderr)
