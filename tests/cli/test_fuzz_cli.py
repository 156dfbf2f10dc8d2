"""`schedcheck fuzz` and `schedcheck mutants score`: exit codes, JSON, regression files."""

import importlib.util
import json
from pathlib import Path

import pytest

from schedcheck.cli.commands.fuzz import IGNORABLE
from schedcheck.cli.entry import main


def _json(capsys, argv):
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_a_finding_exits_1_with_the_promised_json(tmp_path, capsys):
    code, out = _json(
        capsys,
        [
            "fuzz",
            "--engine",
            "toy_engine:make_swap_engine",
            "--budget-s",
            "30",
            "--seed",
            "3",
            "--out",
            str(tmp_path),
            "--no-db",
            "--shrink-runs-max",
            "30",
            "--json",
        ],
    )
    assert code == 1 and out["found"]
    for key in (
        "time_to_detect_s",
        "examples",
        "bundle",
        "shrunk_requests",
        "coverage",
        "never_reached",
        "seed",
        "reproduce",
        "reproduce_campaign",
    ):
        assert key in out
    assert out["shrunk_requests"] <= 4 and out["seed"] == 3
    assert out["reproduce"] == f"schedcheck replay --bundle {out['bundle']}"
    assert main(["replay", "--bundle", out["bundle"], "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["reproduced"] is True


def test_nothing_found_exits_0_and_lists_paths_never_reached(tmp_path, capsys):
    code, out = _json(
        capsys,
        [
            "fuzz",
            "--engine",
            "toy_engine:make_engine",
            "--budget-s",
            "30",
            "--max-examples",
            "32",
            "--out",
            str(tmp_path),
            "--no-db",
            "--json",
        ],
    )
    assert code == 0 and not out["found"] and out["examples"] >= 32
    assert 0 <= out["repeats"] < out["examples"]  # judged from the worker's memory
    assert "fully-cached-prompt" in out["never_reached"]  # the toy engine has no prefix cache
    # its snapshot does not count evictions: unmeasured, not unreached
    assert "evict-cached-block" not in out["never_reached"]
    assert out["unmeasured"] == ["evict-cached-block"]
    assert "drafts-cross-block" not in out["never_reached"]  # no drafts drawn for it


@pytest.mark.parametrize(
    "argv",
    [
        ["fuzz", "--engine", "no_such_module:make", "--budget-s", "1"],
        ["fuzz", "--mutant", "no-such-mutant", "--budget-s", "1"],
        ["fuzz", "--mutant", "radix-leak-chunk-kv", "--block-manager", "hashed", "--budget-s", "1"],
        ["mutants", "score", "--mutant", "no-such-mutant"],
        ["fuzz", "--ignore", "livenes", "--budget-s", "1"],
        ["fuzz", "--ignore", "outputs", "--budget-s", "1"],
    ],
)
def test_bad_input_exits_2(argv, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert "error" in capsys.readouterr().err


def test_fuzz_rejects_a_bad_budget():
    with pytest.raises(SystemExit) as exc:
        main(["fuzz", "--budget-s", "0"])
    assert exc.value.code == 2


def test_mutants_score_finds_two_mutants_and_writes_working_regression_tests(
    tmp_path, capsys, monkeypatch
):
    regressions = tmp_path / "regressions"
    code, out = _json(
        capsys,
        [
            "mutants",
            "score",
            "--budget-s",
            "30",
            "--mutant",
            "block-table-short",
            "--mutant",
            "slot-mapping-from-zero",
            "--out",
            str(tmp_path / "out"),
            "--regressions",
            str(regressions),
            "--json",
        ],
    )
    assert code == 0 and out["score"] == 1.0 and out["max_shrunk_requests"] <= 4
    for row in out["rows"]:
        assert row["found"] and row["regression_ok"]
        module = _load(row["regression"])
        module.test_no_violation()
        module.test_the_mutant_is_caught()
        monkeypatch.setenv("SCHEDCHECK_MUTANT", row["mutant"])
        with pytest.raises(AssertionError):
            module.test_no_violation()  # the regression test kills its mutant
        monkeypatch.delenv("SCHEDCHECK_MUTANT")


def _load(path):
    spec = importlib.util.spec_from_file_location("generated_regression", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_ignored_invariant_is_no_finding(tmp_path, capsys):
    """The toy swap engine's first finding, ignored: the campaign looks past it."""
    argv = ["fuzz", "--engine", "toy_engine:make_swap_engine", "--seed", "3", "--no-db"]
    argv += ["--budget-s", "30", "--shrink-runs-max", "30", "--json"]
    code, first = _json(capsys, [*argv, "--out", str(tmp_path / "a")])
    assert code == 1
    kind = first["kind"]
    code, second = _json(capsys, [*argv, "--out", str(tmp_path / "b"), "--ignore", kind])
    assert second["ignore"] == [kind] and second["kind"] != kind
    assert second["reproduce_campaign"].endswith(f"--ignore {kind}")
    if second["found"]:  # a later invariant of the same bug: its bundle keeps the ignore
        config = json.loads((Path(second["bundle"]) / "config.json").read_text())
        assert config["sim"]["ignore"] == [kind]


def test_continue_past_findings_ignores_each_signature_found_and_goes_on(tmp_path, capsys):
    """The toy swap engine, campaign after campaign: each ignores every signature found
    before it, writes its bundles under OUT/campaign-N, and the run ends at a campaign that
    finds nothing (here: at its example bound) or one it cannot look past."""
    argv = ["fuzz", "--engine", "toy_engine:make_swap_engine", "--seed", "3", "--no-db"]
    argv += ["--budget-s", "60", "--max-examples", "300", "--shrink-runs-max", "30"]
    code, out = _json(capsys, [*argv, "--out", str(tmp_path), "--continue-past-findings", "--json"])
    campaigns = out["campaigns"]
    assert code == 1 and out["found"] and len(campaigns) >= 2
    signatures = [f["signature"] for f in out["findings"]]
    assert signatures == [c["signature"] for c in campaigns if c["found"]]
    assert out["kinds"] == [c["kind"] for c in campaigns if c["found"]]
    assert len(set(signatures)) == len(signatures)  # never the same bug twice
    for i, campaign in enumerate(campaigns):
        assert campaign["ignore"] == signatures[:i]
        if campaign["found"]:
            assert Path(campaign["bundle"]).parent == tmp_path / f"campaign-{i}"
            assert out["findings"][i]["bundle"] == campaign["bundle"]
    last = campaigns[-1]
    assert not last["found"] or not IGNORABLE.fullmatch(last["signature"])


def test_an_ignored_liveness_failure_is_no_finding(tmp_path, capsys):
    """no-cache-hit-cap stalls (a fully cached prompt with nothing left to compute): found
    as liveness, and with --ignore liveness those examples count as clean."""
    argv = ["fuzz", "--mutant", "no-cache-hit-cap", "--seed", "0", "--no-db", "--json",
            "--max-examples", "60", "--budget-s", "60"]  # fmt: skip
    code, first = _json(capsys, [*argv, "--out", str(tmp_path / "a")])
    assert (code, first["kind"]) == (1, "liveness")
    code, second = _json(capsys, [*argv, "--out", str(tmp_path / "b"), "--ignore", "liveness"])
    assert second["kind"] != "liveness" and second["ignore"] == ["liveness"]


def test_four_different_bugs_are_four_distinct_findings_of_one_campaign(tmp_path, capsys):
    """tests/sim/four_bugs_engine.py: two assertions in two places and two misaligned reads
    of two kinds. Counted by invariant, one crash hid the other and one bad read the other;
    by signature each is its own finding with its own shrunk bundle (knock-on damage of the
    swapped blocks may add findings of its own: it is a different read)."""
    argv = ["fuzz", "--engine", "four_bugs_engine:make_engine", "--seed", "0", "--no-db"]
    argv += ["--budget-s", "120", "--max-examples", "200", "--continue-past-findings"]
    code, out = _json(capsys, [*argv, "--out", str(tmp_path), "--json"])
    assert code == 1
    found = {f["signature"]: f for f in out["findings"]}
    assert len(found) == len(out["findings"])  # each signature once
    engine = "four_bugs_engine.py"  # a user's module: named alone, the same in every install
    lines = (Path(__file__).parents[1] / "sim" / engine).read_text().splitlines()
    schedule = 1 + next(i for i, line in enumerate(lines) if '"chunk at token 7"' in line)
    update = 1 + next(i for i, line in enumerate(lines) if '"fifth output"' in line)
    for signature in (
        f"engine-crash[AssertionError at {engine}:schedule:{schedule}]",
        f"engine-crash[AssertionError at {engine}:update_from_output:{update}]",
        "shadow-kv.read[another-request via decode]",
        "shadow-kv.read[own-stale via earlier-chunk]",
    ):
        assert signature in found, sorted(found)
        bundle = Path(found[signature]["bundle"])
        assert (bundle / "violations.json").is_file()
        [first, *_] = json.loads((bundle / "violations.json").read_text())
        assert f"{first['invariant']}[{first['case']}]" == signature
