"""`schedcheck report` on every kind of input: every repository bundle, a run, a campaign
made by a real (small) fuzz run, a nightly output written by the nightly's own writer, and a
bundle with a GPU verification beside it. Needs plotly (the `report` extra)."""

from __future__ import annotations

import html
import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="the `report` extra (plotly) is not installed")

from schedcheck.cli.entry import main
from schedcheck.gpu.reports import Result, write_json
from schedcheck.report.figures.finding import story_figure, timeline_figure
from schedcheck.report.finding import build_finding

ROOT = Path(__file__).resolve().parents[2]
REGRESSIONS = ROOT / "tests" / "regressions" / "bundles"
STALE = REGRESSIONS / "reference_hashed_stale_cache_hit"
BUNDLES = sorted(REGRESSIONS.iterdir()) + sorted((ROOT / "tests" / "vllm" / "bundles").iterdir())
WINDOW = ROOT / "traces" / "corpus" / "windows" / "mooncake_conversation_first4"
SIZE_MAX = 10_000_000


def _self_contained(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    assert page.stat().st_size < SIZE_MAX
    assert "<script src=" not in text and "<link " not in text  # nothing to fetch
    assert text.count("plotly.js v") >= 1  # the library itself is inlined
    return text


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_every_repository_bundle_gets_a_page(bundle, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["report", str(bundle), "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"report written to {out.resolve()}")
    text = _self_contained(out)
    assert 'id="timeline"' in text and 'id="usage"' in text


def test_timeline_and_story_traces_and_the_highlight():
    finding = build_finding(STALE)
    timeline = timeline_figure(finding)
    names = [t.name for t in timeline.data]
    assert names == [
        "prefill",
        "decode",
        "cache hit",
        "preempted",
        "resumed",
        "aborted",
        "finished",
        "violation",
    ]
    assert list(timeline.data[-1].y) == ["r1"] and list(timeline.data[-1].x) == [6]
    shapes = {s.name: s for s in timeline.layout.shapes}
    assert (shapes["violating request"].y0, shapes["violating request"].y1) == (0.5, 1.5)
    assert (shapes["violating step"].x0, shapes["violating step"].x1) == (5.5, 6.5)
    assert list(timeline.layout.yaxis.ticktext) == ["r0", "<b>▶ r1</b>"]
    story = story_figure(finding.story)
    assert [t.name for t in story.data] == [
        "state: in use",
        "state: cached",
        "state: free",
        "owners",
        "engine",
        "content",
        "writes",
        "read",
    ]
    assert list(story.data[1].x) == [2.5, 4.5, None]  # cached over steps 3..4
    assert list(story.data[-1].x) == [6]


def test_a_run_page_from_replay_json(tmp_path, capsys):
    bundle = tmp_path / "run"
    assert main(["replay", str(WINDOW / "trace.jsonl"), "--out", str(bundle), "--json"]) == 0
    run_json = tmp_path / "run.json"
    run_json.write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["report", str(run_json)]) == 0
    text = _self_contained(tmp_path / "run.html")
    assert 'id="run"' in text and "The run over simulated time" in text


def test_a_campaign_directory_links_its_findings(tmp_path, capsys):
    camp = tmp_path / "camp"
    args = [
        "fuzz",
        "--mutant",
        "stale-cache-hit",
        "--budget-s",
        "60",
        "--seed",
        "1",
        "--no-db",
        "--out",
        str(camp),
        "--json",
    ]
    assert main(args) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["report"] == str(Path(record["bundle"]) / "report.html")  # beside the bundle
    _self_contained(Path(record["report"]))
    saved = json.loads((camp / "campaign.json").read_text())
    assert (
        saved["examples"] == record["examples"] and saved["progress"][-1][1] == record["examples"]
    )
    assert sum(saved["configs"]["block_size"].values()) == record["examples"]
    out = tmp_path / "site" / "campaign.html"
    assert main(["report", str(camp), "-o", str(out)]) == 0
    text = _self_contained(out)
    for div in ("examples-0", "coverage-0", "configs-0"):
        assert f'id="{div}"' in text
    pages = sorted(p.name for p in (tmp_path / "site" / "campaign-bundles").iterdir())
    assert pages == [
        f"000-{Path(record['bundle']).name.replace('shrunk', 'raw')}.html",
        f"001-{Path(record['bundle']).name}.html",
    ]
    assert f'href="campaign-bundles/{pages[1]}"' in text


def test_a_nightly_output_links_each_bundle_with_its_verdict(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    nightly = tmp_path / "nightly"
    nightly.mkdir()
    verified = {"verdict": "misaligned", "backend": "torch-ref", "first_divergence": {}}
    results = [
        Result(
            str(STALE.relative_to(ROOT)),
            "torch-ref",
            "misaligned",
            "recorded",
            False,
            "m",
            1.0,
            0.5,
            0.1,
            10,
            verified,
        ),
        Result(str(STALE.relative_to(ROOT)), "sdpa", "refused", "-", False, "no"),
        Result(
            str(BUNDLES[0].relative_to(ROOT)), "torch-ref", "consistent", "consistent", False, "ok"
        ),
    ]
    write_json(nightly / "nightly.json", results, {"device": "cpu", "bundles": 2})
    assert main(["report", str(nightly)]) == 0
    text = _self_contained(nightly / "report.html")
    assert text.count('href="report-bundles/') == 3
    assert "<td>torch-ref</td><td>2</td><td>1</td><td>1</td>" in text  # consistent, misaligned
    bundle_page = (nightly / "report-bundles" / f"000-{STALE.name}.html").read_text()
    assert "GPU verification" in bundle_page


def test_a_gpu_verification_beside_the_bundle_is_shown(tmp_path, capsys):
    bundle = tmp_path / "bundle"
    shutil.copytree(STALE, bundle)
    assert main(["verify", str(bundle), "--json"]) == 1  # misaligned on the CPU reference
    (bundle / "verify.json").write_text(capsys.readouterr().out, encoding="utf-8")
    assert main(["report", str(bundle)]) == 0
    text = _self_contained(bundle / "report.html")
    assert "GPU verification (first divergence per request)" in text
    assert "verify.json: misaligned on torch-ref" in text


def test_bad_input_is_exit_2_with_a_clear_line(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"schedcheck: error: {tmp_path}: not a bundle, a campaign directory")
    (tmp_path / "x.json").write_text("{}")
    assert main(["report", str(tmp_path / "x.json")]) == 2
    assert "not a `schedcheck replay --json` output (no fingerprint)" in capsys.readouterr().err


def test_a_bundle_without_engine_config_is_exit_2_naming_the_file(tmp_path, capsys):
    bundle = tmp_path / "bundle"
    shutil.copytree(STALE, bundle)
    (bundle / "config.json").write_text("{}")
    assert main(["report", str(bundle)]) == 2
    assert capsys.readouterr().err == (
        f'schedcheck: error: {bundle}/config.json: no "engine_config" object\n'
    )


def test_without_plotly_it_is_exit_2_naming_the_extra(tmp_path, monkeypatch, capsys):
    """plotly is imported deep inside the page modules; without it the command says what
    to install, writes nothing and exits 2 (no traceback)."""
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    out = tmp_path / "page.html"
    assert main(["report", str(STALE), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (
        "schedcheck: error: report needs plotly: pip install 'schedcheck[report]'\n"
    )
    assert not out.exists()


def test_a_continue_past_findings_run_lists_its_distinct_findings(tmp_path):
    """OUT/campaign-N of a --continue-past-findings run: one row per signature at the top."""
    signatures = ["engine-crash[AssertionError at x.py:schedule:28]", "shadow-kv.read[a <b> via c]"]
    for i, signature in enumerate([*signatures, None]):
        camp = tmp_path / "camp" / f"campaign-{i}"
        camp.mkdir(parents=True)
        record = {"found": signature is not None, "signature": signature, "kind": "k",
                  "time_to_detect_s": 1.5 + i, "shrunk_requests": 2, "bundle": None,
                  "examples": 10, "progress": [[1.0, 10]], "coverage": {"abort-mid-chunk": 1},
                  "never_reached": [], "configs": {"block_size": {"4": 10}}}  # fmt: skip
        (camp / "campaign.json").write_text(json.dumps(record))
    out = tmp_path / "site" / "campaign.html"
    assert main(["report", str(tmp_path / "camp"), "-o", str(out)]) == 0
    text = _self_contained(out)
    assert text.index("Distinct findings") < text.index("Campaign campaign-0")
    for signature in signatures:
        assert html.escape(signature) in text
