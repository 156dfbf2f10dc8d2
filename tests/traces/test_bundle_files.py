"""Bundles on disk: a schedule may be xz-compressed (schedule.jsonl.xz), as the real-trace
window kept in the repo is; it reads back to the very schedule that was fingerprinted."""

import lzma
import shutil
from pathlib import Path

import pytest

from schedcheck.engines.schedule_io import Fingerprint
from schedcheck.traces.bundle import read_bundle

REPO = Path(__file__).resolve().parents[2]
WINDOW = REPO / "traces" / "corpus" / "windows" / "mooncake_conversation_first4"


def _fingerprint(bundle) -> str:
    fingerprint = Fingerprint()
    for output in bundle.schedule():
        fingerprint.update(output)
    return fingerprint.hexdigest()


def test_the_real_trace_window_reads_back_to_its_fingerprinted_schedule():
    bundle = read_bundle(WINDOW)
    assert not (WINDOW / "schedule.jsonl").exists()
    assert (bundle.summary["steps"], bundle.summary["finished"], bundle.violations) == (796, 4, [])
    assert _fingerprint(bundle) == bundle.summary["fingerprint"]


def test_plain_and_compressed_schedules_read_the_same(tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(WINDOW, plain)
    packed = plain / "schedule.jsonl.xz"
    (plain / "schedule.jsonl").write_bytes(lzma.decompress(packed.read_bytes()))
    packed.unlink()
    assert _fingerprint(read_bundle(plain)) == _fingerprint(read_bundle(WINDOW))


def test_a_bundle_without_a_schedule_names_both_files(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(WINDOW, broken)
    (broken / "schedule.jsonl.xz").unlink()
    with pytest.raises(ValueError, match=r"missing schedule\.jsonl or schedule\.jsonl\.xz"):
        read_bundle(broken)
