"""`schedcheck sweep`: the bundled Mooncake slice across 3 block sizes x 2 budgets x 2 block
managers gives 12 rows in grid order; a mutant fails exactly the points it reaches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schedcheck.fuzz.sweep import grid

GRID = [
    "--max-requests",
    "6",
    "--block-sizes",
    "1,4,16",
    "--budgets",
    "512,2048",
    "--block-managers",
    "hashed,radix",
]


def _sweep(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", "sweep", *GRID, "--json", *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_grid_is_every_combination_in_argument_order():
    points = grid(["reference"], ["hashed", "radix"], [1, 16], [512, None], [None, (10.0, 5.0)])
    assert len(points) == 16
    assert [p.index for p in points] == list(range(16))
    assert points[1].label == "001-reference-hashed-bs1-b512-w10+5"
    assert points[3].label == "003-reference-hashed-bs1-bdefault-w10+5"
    assert (points[8].block_manager, points[8].block_size) == ("radix", 1)


def test_the_clean_engine_is_clean_at_all_twelve_points(tmp_path):
    code, report = _sweep(tmp_path, "--out", str(tmp_path / "clean"), "--workers", "2")
    assert code == 0 and report["findings"] == 0
    rows = report["points"]
    assert [r["index"] for r in rows] == list(range(12))
    assert {r["outcome"] for r in rows} == {"clean"}
    assert [(r["block_manager"], r["block_size"], r["max_num_batched_tokens"]) for r in rows] == [
        (m, bs, b) for m in ("hashed", "radix") for bs in (1, 4, 16) for b in (512, 2048)
    ]
    assert {r["requests"] for r in rows} == {6}
    by_budget = {
        b: {r["steps"] for r in rows if r["max_num_batched_tokens"] == b} for b in (512, 2048)
    }
    assert by_budget == {512: {833}, 2048: {803}}  # no KV pressure: the block size does not matter


def test_a_hashed_mutant_fails_its_block_size_one_points_only(tmp_path):
    code, report = _sweep(tmp_path, "--out", str(tmp_path / "m"), "--mutant", "hash-no-parent")
    assert code == 1 and report["findings"] == 2
    outcome = {r["label"]: r["outcome"] for r in report["points"]}
    # one-token blocks: equal tokens under different parents share a hash without the parent
    assert outcome == {
        "000-reference-hashed-bs1-b512": "shadow-kv.read",
        "001-reference-hashed-bs1-b2048": "shadow-kv.read",
        "002-reference-hashed-bs4-b512": "clean",
        "003-reference-hashed-bs4-b2048": "clean",
        "004-reference-hashed-bs16-b512": "clean",
        "005-reference-hashed-bs16-b2048": "clean",
        **{
            f"{i:03d}-reference-radix-bs{bs}-b{b}": "refused"  # the mutant lives in hashed
            for i, (bs, b) in enumerate(
                ((bs, b) for bs in (1, 4, 16) for b in (512, 2048)), start=6
            )
        },
    }
    for row in report["points"][:2]:
        assert row["shrunk_requests"] == 2
        replay = ["replay", "--bundle", row["shrunk_bundle"], "--json"]
        again = subprocess.run(
            [sys.executable, "-m", "schedcheck.cli", *replay],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert again.returncode == 1 and json.loads(again.stdout)["reproduced"] is True


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--block-sizes", "1,,4", "no empty item"),
        ("--budgets", "0", "is not >= 1"),
        ("--windows", "5", "START:DURATION"),
    ],
)
def test_bad_grid_lists_are_exit_2(tmp_path, flag, value, words):
    done = subprocess.run(
        [sys.executable, "-m", "schedcheck.cli", "sweep", flag, value, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr
