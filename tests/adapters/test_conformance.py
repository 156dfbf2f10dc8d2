"""`schedcheck conformance`: the reference engine passes on both block managers; each of
three broken adapters fails with a clear line; a declared engine skips what it lacks."""

import json

import pytest

from schedcheck.cli.entry import main
from schedcheck.sim.bundles import rerun_bundle, same_violations
from schedcheck.sim.conformance.checks import CHECKS

NAMES = [c.name for c in CHECKS]


def _kit(capsys, *args):
    code = main(["conformance", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _failures(report):
    return {c["name"]: c["lines"] for c in report["checks"] if c["status"] == "fail"}


@pytest.mark.parametrize("block_manager", ["hashed", "radix"])
def test_the_reference_engine_passes_every_check(capsys, block_manager):
    code, report = _kit(capsys, "--engine", "reference", "--block-manager", block_manager)
    assert code == 0 and report["passed"]
    assert [(c["name"], c["status"]) for c in report["checks"]] == [(n, "pass") for n in NAMES]
    notes = {c["name"]: c["notes"] for c in report["checks"]}
    assert notes["prefix-hit"] == ["r1 cached 8 tokens"]
    assert notes["preemption"] == ["preempted ['r1']"]


def test_a_miscounting_adapter_fails_at_the_protocol(capsys):
    code, report = _kit(capsys, "--engine", "adapters_broken:make_miscounting")
    failures = _failures(report)
    assert code == 1 and not report["passed"]
    assert failures["admission"] == [
        "step 0: protocol.chunk-length: request r0 position 0: token_ids holds 7 ids, "
        "num_scheduled_tokens is 8 (num_computed_tokens 0)"
    ]
    assert set(failures) == set(NAMES)


def test_an_adapter_without_prefix_hits_fails_the_prefix_checks(capsys):
    code, report = _kit(capsys, "--engine", "adapters_broken:make_no_prefix_hit")
    assert code == 1
    assert _failures(report) == {
        "prefix-hit": [
            "r1 admitted with num_cached_tokens 0, expected a prefix hit: its first 2 blocks "
            "equal finished r0's (prefix caching on)"
        ],
        "full-hit": [
            "r1 (r0's prompt again) admitted with num_cached_tokens 0, expected a prefix hit"
        ],
    }


def test_an_adapter_that_swallows_finishes_fails_with_the_lost_request(capsys):
    code, report = _kit(capsys, "--engine", "adapters_broken:make_swallows_finish")
    failures = _failures(report)
    assert code == 1 and set(failures) == set(NAMES)
    assert failures["later-turn"] == [
        "step 4: protocol.lost-request: request r0: has_unfinished_requests() is False, but "
        "the request was never reported finished, aborted or rejected; later turn(s) r1 "
        "wait for it"
    ]


def test_a_declared_engine_skips_what_it_does_not_declare(capsys):
    code, report = _kit(capsys, "--engine", "adapters_declared:make_engine")
    status = {c["name"]: (c["status"], c["lines"]) for c in report["checks"]}
    assert code == 0
    assert status["cache-salt"] == ("skip", ["the engine declares no cache_salt"])
    assert [n for n, (s, _) in status.items() if s != "pass"] == ["cache-salt"]
    assert status["prefix-hit"] == ("pass", [])  # its block size is 8: 2 blocks = 16 tokens
    assert report["checks"][NAMES.index("prefix-hit")]["notes"] == ["r1 cached 16 tokens"]


def test_text_output_is_one_line_per_check_or_failure(capsys):
    code = main(["conformance", "--engine", "adapters_broken:make_no_prefix_hit"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert lines[2].startswith("FAIL prefix-hit: r1 admitted with num_cached_tokens 0")
    assert lines[3].startswith("FAIL full-hit: r1 (r0's prompt again)")
    assert lines[-1] == (
        "conformance adapters_broken:make_no_prefix_hit (its default block manager): "
        "8 passed, 2 failed, 0 skipped of 10 checks"
    )
    assert len(lines) == 11


def test_failed_checks_leave_bundles_that_replay(capsys, tmp_path):
    out = tmp_path / "kit"
    main(["conformance", "--engine", "adapters_broken:make_unknown_id", "--out", str(out)])
    capsys.readouterr()
    result, bundle = rerun_bundle(out / "admission")
    assert [v.invariant for v in result.violations] == ["protocol.unknown-request"]
    assert same_violations(result, bundle.violations)


def test_bad_input_exits_2(capsys):
    assert main(["conformance", "--block-manager", "paged"]) == 2
    assert capsys.readouterr().err.strip() == (
        "schedcheck: error: engine reference does not support --block-manager paged: "
        "accepted ['hashed', 'radix']"
    )
    assert main(["conformance", "--engine", "no_such_module:make"]) == 2


def test_an_engine_that_never_chunks_with_prefix_caching_passes(capsys):
    """Its fit_config turns chunked prefill off under prefix caching: the chunked checks run
    without prefix caching, the others unchunked with a budget every prompt fits."""
    code, report = _kit(capsys, "--engine", "adapters_declared:make_one_or_the_other")
    assert code == 0
    assert [(c["name"], c["status"]) for c in report["checks"]] == [(n, "pass") for n in NAMES]
    notes = {c["name"]: c["notes"] for c in report["checks"]}
    assert notes["chunked-prefill"] == ["prefill chunks [8, 8, 8, 1]"]
