"""The nightly job on a CPU: outputs written, table printed last, exit 1 on a failure."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from schedcheck.gpu import nightly, scenarios

REPO = Path(__file__).resolve().parents[2]
REGRESSIONS = REPO / "tests" / "regressions"


def test_scenarios_pass_and_outputs_are_written(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = nightly.main(
        [
            "--out",
            str(out),
            "--device",
            "cpu",
            "--backends",
            "torch-ref,sdpa",
            "--block-size",
            "4",
            "--no-regressions",
        ]
    )
    printed = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert printed[-2].startswith("| torch-ref | 10 | 3 | 7 | 0 | 0 | 0 |")
    assert printed[-1].startswith("| sdpa | 10 | 3 | 7 | 0 | 0 | 0 |")
    suite = ET.parse(out / "nightly.xml").getroot()
    assert suite.get("tests") == "20" and suite.get("failures") == "0"
    data = json.loads((out / "nightly.json").read_text())
    assert {r["verdict"] for r in data["results"]} == {"consistent", "misaligned"}
    assert all(r["cost"] > 0 for r in data["results"])
    assert "| backend | bundles |" in (out / "nightly.md").read_text()


def test_unexpected_misalignment_fails(tmp_path: Path, capsys) -> None:
    stale = scenarios.misaligned(4)[0]
    bundle = scenarios.write_scenario_bundle(stale, tmp_path / "corpus" / "stale")
    (bundle / "violations.json").write_text("[]\n")  # recorded as a clean run
    out = tmp_path / "out"
    code = nightly.main(
        [
            str(tmp_path / "corpus"),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--backends",
            "torch-ref,flash-attn-4",
            "--no-scenarios",
            "--no-regressions",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 1 and "FAIL torch-ref" in printed
    suite = ET.parse(out / "nightly.xml").getroot()
    assert (suite.get("failures"), suite.get("skipped")) == ("1", "1")
    assert "misaligned" in (out / "nightly.md").read_text()


def test_regression_bundles_replay_without_failures(tmp_path: Path, capsys) -> None:
    """Every bundle under tests/regressions replays: none errors, none that recorded no
    violation misaligns (bundles with recorded violations are informational)."""
    bundles = nightly.find_bundles([REGRESSIONS], 1000)
    assert len(bundles) == len(list(REGRESSIONS.glob("test_*.py")))  # one per mutant
    code = nightly.main(["--out", str(tmp_path), "--device", "cpu", "--backends", "torch-ref",
                         "--no-scenarios", "--regressions", str(REGRESSIONS)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    data = json.loads((tmp_path / "nightly.json").read_text())
    assert len(data["results"]) == len(bundles)
    assert not [r for r in data["results"] if r["verdict"] == "error"]


def test_real_trace_windows_are_found_with_their_compressed_schedules() -> None:
    windows = REPO / "traces" / "corpus" / "windows"
    found = nightly.find_bundles([windows], 1000)
    assert [p.name for p in found] == ["mooncake_conversation_first4"]


def test_a_missing_regressions_directory_is_bad_usage(tmp_path: Path, capsys) -> None:
    """Run elsewhere than the repository root, the job says so instead of replaying nothing."""
    code = nightly.main(["--out", str(tmp_path), "--regressions", str(tmp_path / "nowhere")])
    assert code == 2
    assert "no regression bundles at" in capsys.readouterr().err


def test_past_the_budget_the_rest_is_skipped_and_the_reports_still_come_out(
    tmp_path: Path, capsys
) -> None:
    code = nightly.main(["--out", str(tmp_path), "--device", "cpu", "--backends", "torch-ref",
                         "--block-size", "4", "--no-regressions", "--budget-s", "0"])  # fmt: skip
    printed = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert printed[-1].startswith("| torch-ref | 10 | 0 | 0 | 0 | 10 | 0 | - |")
    data = json.loads((tmp_path / "nightly.json").read_text())
    assert {r["verdict"] for r in data["results"]} == {"skipped"}
    suite = ET.parse(tmp_path / "nightly.xml").getroot()
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("10", "10", "0")
