"""The vLLM campaigns' findings, pinned by their shrunk bundles (README "Fuzz campaigns").

Each folder under bundles/ is named `<vLLM version>-<block manager>-<invariant>` and runs
only in that version's env (tox -e vllm-v0.6.0, ...): the replay must give back the
recorded violations and the recorded fingerprint. A finding that no longer reproduces
(a harness change, a different vLLM) fails here instead of silently leaving the README.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from schedcheck.fuzz.bisect import tox_env
from schedcheck.fuzz.regression import assert_caught

BUNDLE_DIR = Path(__file__).resolve().parent / "bundles"
BUNDLES = sorted(BUNDLE_DIR.iterdir())


def _vllm_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.vllm
@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_the_finding_reproduces(bundle: Path) -> None:
    version = bundle.name.split("-", 1)[0]
    if _vllm_version() != version:
        pytest.skip(f"needs vllm=={version} (tox -e {tox_env(version)})")
    assert_caught(bundle, None)


# bundles recorded in one release that fail as the same kind in others (docs/bisect.md,
# measured with `schedcheck bisect`): replayed there too, the kind checked (the schedule,
# and so the fingerprint, may differ between releases)
ALSO_FAILS_IN = {
    "0.11.0-v1-priority-engine-crash": ("0.10.1.1",),
    "0.33.0-spec-engine-crash": ("0.25.0",),  # clean in 0.34.0: 0.34.0-spec-engine-crash
    # 0.25.0 schedules a chunk of drafts only (async too: the adapter's fault since
    # 2026-12-07, its harness-crash before); 0.33.0 on assert there
    "0.25.0-async-spec-engine-crash": ("0.33.0", "0.34.0"),
    "0.33.0-spec-liveness": ("0.34.0",),
    "0.33.0-v1-liveness-scheduled-tokens": ("0.25.0", "0.34.0"),
    "0.11.1-v1-async-sliding-block-pool-cached-unwritten": ("0.10.1.1", "0.11.0", "0.12.0"),
    "0.25.0-spec-priority-block-pool-cached-unwritten": ("0.33.0", "0.34.0"),
    "0.12.0-spec-priority-block-pool-cached-unwritten": ("0.11.1",),
    "0.33.0-v1-async-priority-block-pool-cached-unwritten": ("0.34.0",),
    "0.33.0-v1-hybrid-async-priority-block-pool-cached-unwritten": ("0.34.0",),
    "0.33.0-v1-priority-block-pool-cached-unwritten": ("0.34.0",),
    "0.12.0-async-spec-sliding-shadow-kv-read": ("0.11.1", "0.25.0"),
}
ALSO = [(name, release) for name, releases in ALSO_FAILS_IN.items() for release in releases]


def _replayed_kind(name: str, release: str) -> str:
    """The kind bundle `name` fails as in this env's vLLM (skip unless it is `release`):
    its first violation's invariant, "liveness" or "clean"."""
    if _vllm_version() != release:
        pytest.skip(f"needs vllm=={release} (tox -e {tox_env(release)})")
    from schedcheck.sim.bundles import rerun_bundle

    result, _ = rerun_bundle(BUNDLE_DIR / name)
    if result.stuck:
        return "liveness"
    return result.violations[0].invariant if result.violations else "clean"


@pytest.mark.vllm
@pytest.mark.parametrize(("name", "release"), ALSO, ids=[f"{n}@{r}" for n, r in ALSO])
def test_the_finding_also_fails_in_the_releases_it_applies_to(name: str, release: str) -> None:
    from schedcheck.fuzz.bisect import recorded_kind

    assert _replayed_kind(name, release) == recorded_kind(BUNDLE_DIR / name)


# bundles of a bug vLLM fixed (docs/bisect.md): clean in every release from the fix on,
# so a regression of the fix (or of the harness's reading of it) fails here, in CI's env
CLEAN_IN = {
    # vllm#47728: sliding-window blocks freed on the processed-token count, not the
    # optimistic one of async scheduling (a rejected draft moves the chunk back)
    "0.12.0-async-spec-sliding-shadow-kv-read": ("0.33.0", "0.34.0"),
    "0.25.0-async-spec-sliding-shadow-kv-read": ("0.33.0", "0.34.0"),
    # vllm#42043 (fixed by #42117): a reset of the running requests under async scheduling
    # drops exactly the placeholders in flight (0.25.0), the stale output (0.33.0 on)
    "0.12.0-async-reset-outputs-returned": ("0.25.0", "0.33.0", "0.34.0"),
}
CLEAN = [(name, release) for name, releases in CLEAN_IN.items() for release in releases]


@pytest.mark.vllm
@pytest.mark.parametrize(("name", "release"), CLEAN, ids=[f"{n}@{r}" for n, r in CLEAN])
def test_the_finding_is_clean_where_vllm_fixed_it(name: str, release: str) -> None:
    assert _replayed_kind(name, release) == "clean"
