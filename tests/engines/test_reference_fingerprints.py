"""The reference engine's schedules, pinned: fingerprints recorded from main before the
mutants moved out of the clean code (issue 20), so a refactor that changes a schedule fails.

Three sets of runs:

- every bundle in the repository (tests/regressions/bundles, tests/sim/bundles, the corpus
  window) replayed clean, without its mutant: the clean engine's schedule of that trace;
- the bundled Mooncake slice (traces/corpus) under a matrix of configs, both block managers;
- a generated shared-prefix trace, clean and with every scheduler and block-manager mutant
  (the schedule it makes, up to its first violation), so a mutant moved out of the clean
  code keeps its exact behaviour.

The regression tests themselves (tests/regressions) check each bundle with its mutant on
against the recorded fingerprint and violations.

To print the current values (after a change that is meant to change schedules):
    python tests/engines/test_reference_fingerprints.py
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.fuzz.shrink import bundle_run
from schedcheck.sim.loop import RunResult, SimOptions, run
from schedcheck.traces import read_trace
from schedcheck.traces.generators import GenOptions, LengthSpec, generate
from schedcheck.traces.schema import TraceRequest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "traces" / "corpus" / "mooncake_conversation_first200.jsonl"
BUNDLE_DIRS = (REPO / "tests" / "regressions" / "bundles", REPO / "tests" / "sim" / "bundles")
WINDOW = REPO / "traces" / "corpus" / "windows" / "mooncake_conversation_first4"
NUM_CORPUS_REQUESTS = 12

# A small cache and budget, so the slice preempts, evicts and rejects (prompts run to 20k
# tokens: a request over 1,024 blocks of 16 is rejected).
_TIGHT = {"num_gpu_blocks": 1024, "max_num_batched_tokens": 2048}

CORPUS_RUNS: dict[str, dict[str, Any]] = {
    "hashed": {},
    "radix": {"block_manager": "radix"},
    "hashed-block-align-priority": {
        "long_prefill_token_threshold": 512,
        "extra": {"chunk_align": "block", "policy": "priority"},
    },
    "radix-deterministic-align": {
        "block_manager": "radix",
        "extra": {"chunk_align": "deterministic"},
    },
    "hashed-lookahead": {"num_lookahead_tokens": 3},
    "radix-lookahead": {"block_manager": "radix", "num_lookahead_tokens": 2},
    "hashed-no-prefix-caching": {"enable_prefix_caching": False},
    "radix-no-prefix-caching": {"block_manager": "radix", "enable_prefix_caching": False},
    "hashed-no-chunked-prefill": {"enable_chunked_prefill": False, "max_num_batched_tokens": 24576},
    "hashed-faults": {"faults": True},
    "radix-faults": {"block_manager": "radix", "faults": True},
    "radix-block-size-32": {"block_manager": "radix", "block_size": 32, "num_gpu_blocks": 512},
}
_FAULTS = {"preempt": 0.05, "evict": 0.05, "reduced-budget": 0.05}
_GROUP_FAULTS = {"preempt": 0.3, "evict": 0.3, "reduced-budget": 0.3}

# Mutants run on a generated trace where they bite: groups sharing a system prompt, lengths
# at block boundaries (k*16 - 1, k*16, k*16 + 1), every request at time 0 (the same step),
# alternate requests salted, some aborted while they run, a cache too small for all of them
# at once, and later the first prompts again, cut to whole blocks (fully cached prompts).
_GROUPS = {"block_size": 16, "num_gpu_blocks": 40, "max_num_batched_tokens": 64}

GROUP_RUNS: dict[str, dict[str, Any]] = {
    "hashed": {},
    "radix": {"block_manager": "radix"},
    "hashed-faults": {"faults": True},
    "radix-faults": {"block_manager": "radix", "faults": True},
}

MUTANT_RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "cache-partial-block": ("hashed", {}),
    "no-cache-hit-cap": ("hashed", {}),
    "whole-prompt-computed": ("hashed", {}),
    "same-step-cached": ("hashed", {}),
    "block-table-short": ("hashed", {}),
    "no-lookahead-slots": ("hashed", {"num_lookahead_tokens": 3}),
    "stale-cache-hit": ("hashed", {"num_gpu_blocks": 24}),
    "manager-computed-disagree": ("hashed", {}),
    "hash-no-parent": ("hashed", {}),
    "hash-ignores-salt": ("hashed", {}),
    "resume-drops-last-token": ("hashed", {"faults": True}),
    "radix-leak-chunk-kv": ("radix", {}),
    "radix-abort-frees-tree-pages": ("radix", {"faults": True}),
    "radix-prefix-not-advanced": ("radix", {"long_prefill_token_threshold": 8}),
    "chunk-before-prefix-hit": ("hashed", {}),
    "never-reject": ("hashed", {"num_gpu_blocks": 8}),
    "spec-rollback-off-by-one": ("hashed", {"num_speculative_tokens": 3}),
    "cache-rejected-draft-block": (  # block size 2: the bonus often ends a block
        "hashed",
        {"num_speculative_tokens": 2, "block_size": 2, "num_gpu_blocks": 320, "faults": True},
    ),
}


def _corpus_run(name: str) -> RunResult:
    knobs = dict(CORPUS_RUNS[name])
    faults = _FAULTS if knobs.pop("faults", False) else {}
    config = EngineConfig(**{**_TIGHT, **knobs})
    requests = list(itertools.islice(read_trace(CORPUS), NUM_CORPUS_REQUESTS))
    return run(requests, "reference", config, SimOptions(seed=3, faults=faults))


def _groups_trace() -> list[TraceRequest]:
    options = GenOptions(
        num_groups=3,
        group_size=5,
        rate_per_s=float("inf"),
        prefix_lengths=LengthSpec.boundary(16, 48, 16),
        input_lengths=LengthSpec.boundary(1, 40, 16),
        output_lengths=LengthSpec.uniform(1, 24),
        vocab_size=50,
    )
    requests = [
        replace(r, cache_salt=("a", None)[i % 2], abort_time_s=0.04 if i % 5 == 3 else None)
        for i, r in enumerate(generate("shared-prefix", 7, options))
    ]
    again = [
        replace(
            r,
            request_id=f"again-{r.request_id}",
            arrival_time_s=0.1,
            abort_time_s=None,
            prompt_token_ids=r.prompt_token_ids[: len(r.prompt_token_ids) // 16 * 16],
        )
        for r in requests[:4]
        if r.prompt_token_ids is not None
    ]
    return requests + again


def _groups_run(knobs: dict[str, Any]) -> RunResult:
    knobs = dict(knobs)
    faults = _GROUP_FAULTS if knobs.pop("faults", False) else {}
    config = EngineConfig(**{**_GROUPS, **knobs})
    return run(_groups_trace(), "reference", config, SimOptions(seed=5, faults=faults))


def _mutant_run(mutant: str) -> RunResult:
    block_manager, knobs = MUTANT_RUNS[mutant]
    return _groups_run({"block_manager": block_manager, **knobs, "mutant": mutant})


def _bundles() -> list[Path]:
    found = [p for d in BUNDLE_DIRS for p in sorted(d.iterdir()) if (p / "config.json").exists()]
    return [*found, WINDOW]


def _clean_replay(bundle: Path) -> RunResult:
    parts, requests = bundle_run(bundle)
    return parts.run(requests, clean=True)


def _summary(result: RunResult) -> tuple[str, int, int]:
    return result.fingerprint, result.steps, len(result.violations)


# (fingerprint, steps, violations), recorded from main at b3367ef
CLEAN_BUNDLE_FINGERPRINTS: dict[str, tuple[str, int, int]] = {
    "reference_hashed_block_table_hits_only": (
        "3557015334910de553a51ebcf19a75e8e6699a242ff4af24a06f1a556607abda",
        6,
        0,
    ),
    "reference_hashed_block_table_short": (
        "e7a0145f1187e912af4ee6a7c53bf970c9e68611e8f4e4ec1bc8f6fb1f41f845",
        1,
        0,
    ),
    "reference_hashed_cache_partial_block": (
        "d12009d427f35cd1f7d1b8b538f214fbe9b66cfde5c7292a84d47ea631acfce9",
        4,
        0,
    ),
    "reference_hashed_chunk_before_prefix_hit": (
        "3e8b27bf49a806b5c539d02437d88cf6c958e822c3182c64c0b0e179604750e2",
        6,
        0,
    ),
    "reference_hashed_hash_ignores_salt": (
        "e1ad0ca62104dab84e1af3b98472bcde5f9e6ef37dcf7ad973f3adee41ff8b5a",
        10,
        0,
    ),
    "reference_hashed_hash_no_parent": (
        "2619e61d7bb30f923b876936fbdf487c9986c937511afc486c5ed56d03d22efe",
        2,
        0,
    ),
    "reference_hashed_manager_computed_disagree": (
        "5939f19c2d4fdc411c8dd7e032a4e1a1820addffb6ef7bf2b3fb62b59d4db24b",
        5,
        0,
    ),
    "reference_hashed_never_reject": (
        "497c1975a52177ecce25dda469b13a291d7f1dada8aa3bfe145fd97b92a729d9",
        1,
        0,
    ),
    "reference_hashed_no_cache_hit_cap": (
        "4a23084e074cc43a9e5c20c48bd220e96a63508e0b1d6fed6ffba233539774e6",
        8,
        0,
    ),
    "reference_hashed_no_lookahead_slots": (
        "8060cc0856e4e6da9d69b0d6f0c447af28526d35a92f8c57815f4cbefbf6684b",
        4,
        0,
    ),
    "reference_hashed_resume_drops_last_token": (
        "ce309e705b198e3d009ddf6d097f15cb723008f63fdb1f7095cf54bb9c866e12",
        229,
        0,
    ),
    "reference_hashed_same_step_cached": (
        "d12009d427f35cd1f7d1b8b538f214fbe9b66cfde5c7292a84d47ea631acfce9",
        4,
        0,
    ),
    "reference_hashed_seq_len_full_prompt": (
        "d12009d427f35cd1f7d1b8b538f214fbe9b66cfde5c7292a84d47ea631acfce9",
        4,
        0,
    ),
    "reference_hashed_slot_mapping_from_zero": (
        "099acd82902aec4376a5a5d6c3cb6c4e8974b41561a94cb3c50299ae44fd7f70",
        2,
        0,
    ),
    "reference_hashed_stale_cache_hit": (
        "1e8a82eded61516306e23f815ba2abfeac537dfb8f433eb111da9c5bfa9b03c5",
        9,
        0,
    ),
    "reference_hashed_whole_prompt_computed": (
        "d12009d427f35cd1f7d1b8b538f214fbe9b66cfde5c7292a84d47ea631acfce9",
        4,
        0,
    ),
    "reference_radix_radix_abort_frees_tree_pages": (
        "50b83750b4415a529d4c8dfa6cbbbf20b9519d7393c54e7bc39a17d79b84b179",
        13,
        0,
    ),
    "reference_radix_radix_leak_chunk_kv": (
        "254aba5fbef4d663c7b4821c94ae8e87d6a154be5c58e24ecf874cca85aa185b",
        8,
        0,
    ),
    "reference_radix_radix_prefix_not_advanced": (
        "d12009d427f35cd1f7d1b8b538f214fbe9b66cfde5c7292a84d47ea631acfce9",
        4,
        0,
    ),
    "clean-hashed-liveness-after-self-preemption": (
        "a969b3ecf3b9a12b35403ae6fa0069cf21063b3d6028c6f917e92e925027146d",
        10,
        0,
    ),
    "clean-hashed-liveness-under-forced-preemption": (
        "b5168a46f6b5b02d6400ba44d3cb072f16e3afcf5464afa2c4337aaff281f986",
        30,
        0,
    ),
    "clean-radix-write-into-shared-after-dedup": (
        "fc13eafc10e5a28090133ec4f71a7cc854d049d15f8991f69315fd9dda74ef87",
        20,
        0,
    ),
    "mooncake_conversation_first4": (
        "ec08ee664da51cd96dbcf8c201c07db65464a730844ea00dd087848f5383e344",
        796,
        0,
    ),
    "reference_hashed_cache_rejected_draft_block": (
        "dce30d9295b1f95c4dff9dc1502465393a4a1df1d1405f6f9408cd507f71ce9b",
        17,
        0,
    ),
    "reference_hashed_spec_rollback_off_by_one": (
        "bfe14eb4594a6d121e095ca918c962f894daaf8cf42cef7b4353a5448fa4785e",
        5,
        0,
    ),
}
CORPUS_FINGERPRINTS: dict[str, tuple[str, int, int]] = {
    "hashed": ("e6390dbca9b3afc1bac59f16390d5ee05a338fd1b7344c7ca7550f2cfd27de48", 1770, 0),
    "hashed-block-align-priority": (
        "06b2da9e840e2540c8e9abc34f3d7cbad9654ad660e7cd93233f4d74276f6e94",
        1798,
        0,
    ),
    "hashed-faults": ("ee1caab554c639c5c0ff6b1997b21d01aa9e1882f35465ea2ea6adb4cb46f6d9", 1772, 0),
    "hashed-lookahead": (
        "9e05221cd37d557f174284358bdbe4e0edec9dd54fbfc5cb1af6ecbabcdd8332",
        1769,
        0,
    ),
    "hashed-no-chunked-prefill": (
        "2961bd54969fa6de3f636fcd506a04d8becf714e8c0de93155d01d577796043f",
        1757,
        0,
    ),
    "hashed-no-prefix-caching": (
        "a9c062cdfc08b702021f12a8437492040873faaafb6aa8a5897f2a6aa8923627",
        1776,
        0,
    ),
    "radix": ("2c81b5868963e10f35448389332b0ed1e212d18455dcae4233cb4cac1237709f", 1769, 0),
    "radix-block-size-32": (
        "86c2e818c0b1de1ad35534f108dbbf681c959e69053560bf61ccf3f896a63872",
        1769,
        0,
    ),
    "radix-deterministic-align": (
        "03d07e0706005d4465cc2c82cad96843ace5b739852161de87eb294740ef17a5",
        1773,
        0,
    ),
    "radix-faults": ("a28a607dd0548c009613f48339db3e28d3e16f234cd8ce01b27cda2bf59eff07", 1772, 0),
    "radix-lookahead": (
        "5f4c33a34f84a4daa47eda102f941556a39eff52dd57088b5b4df99a19a563ce",
        1769,
        0,
    ),
    "radix-no-prefix-caching": (
        "a9c062cdfc08b702021f12a8437492040873faaafb6aa8a5897f2a6aa8923627",
        1776,
        0,
    ),
}
GROUP_FINGERPRINTS: dict[str, tuple[str, int, int]] = {
    "hashed": ("3f56e3b7ad0204e755680a024ca76dc837e737f84dbdd7c2aa391806a2f9db8c", 44, 0),
    "hashed-faults": ("a3673d0a3c44d2ca8e6201ef9a86c7f1b0c4e145072b0589040f18baaaa82d82", 49, 0),
    "radix": ("a018d3d03e57cc31f5ef48743fdf7d77cb35645e480e8db63f412005d81e12f2", 43, 0),
    "radix-faults": ("a8215d729b3383a3cb04e52cef6c8e0f78e6e11b04fe8117037c18b18805a43a", 49, 0),
}
MUTANT_FINGERPRINTS: dict[str, tuple[str, int, int]] = {
    "block-table-short": ("a439e627c2f176e70441968e57e78716ab1a67e6f2a1eb77c41ef14996a1201a", 6, 3),
    "cache-partial-block": (
        "01c9d88d52efce7abb9b5c08165a46c016958b5bdb1b7d4fd658e95d022ab452",
        1,
        1,
    ),
    "chunk-before-prefix-hit": (
        "6c9ae796756ce6d4db1074bdc283543854a01aeec3c321e6159d248b5592c645",
        5,
        4,
    ),
    "hash-ignores-salt": ("9d88f4565ed92e0ba30439fb4bf41dbb01ec847c6d14db274bcf7d8de847e27d", 5, 2),
    "hash-no-parent": ("219279a39208b979731941c6c86899953aca279520cef55466e9d8422e2f319b", 6, 1),
    "manager-computed-disagree": (
        "9d60b6cdead6304abf699c83ecf0c69703b76b8a3876d0624625b5e49faa3716",
        17,
        1,
    ),
    "never-reject": ("0bc901e56fdd1d772d7cb11786743d1bd448834b3ef8333c6ac041d7c2b369fb", 234, 0),
    "no-cache-hit-cap": ("f884a82aa8ed643bc537e16aacc1c182f0a049feb4b25edc97d12a73d90e110f", 35, 0),
    "no-lookahead-slots": (
        "740ad23b5d68a75d87cce97f61b513c16abc8e18e13d2e3a8fadce64404ed16d",
        5,
        1,
    ),
    "radix-abort-frees-tree-pages": (
        "ec437154a0e7f636988535644f102935905eac3ebd8314b911929e151a1aaf16",
        8,
        1,
    ),
    "radix-leak-chunk-kv": (
        "c74c396d3411037382942d9d9df514b3a00ce93f9b06863e164b5d4c5a5be093",
        17,
        1,
    ),
    "radix-prefix-not-advanced": (
        "630d00b3cc4b9114357b99124cc15b91d62b094b66b5e31973f63d8d439332e2",
        1,
        8,
    ),
    "resume-drops-last-token": (
        "5c16ecfaa516ad8a2e82c9362342ca4ac31ea25dac5df00aaa734292ae5b62d6",
        3,
        2,
    ),
    "same-step-cached": ("8d19cbce84bdc08f1d83b92a09704873b3c0e43998f5fe07298eb89835f6361b", 1, 1),
    "stale-cache-hit": ("9c8e1a8ee7d882060bb09a5659c955cfde26fdec891123602139e501176bcfe0", 22, 1),
    "whole-prompt-computed": (
        "8d19cbce84bdc08f1d83b92a09704873b3c0e43998f5fe07298eb89835f6361b",
        1,
        1,
    ),
    "spec-rollback-off-by-one": (
        "dd105c50ff00e33c8eb5a27a12318f5f224a2168e869236ecf23334e4c3f9459",
        2,
        1,
    ),
    "cache-rejected-draft-block": (
        "681da991030cb7f4e591a57df44e4c3ceffc89775bdbfc477fd986f4dac7586d",
        10,
        1,
    ),
}


@pytest.mark.parametrize("bundle", _bundles(), ids=lambda p: p.name)
def test_the_clean_engine_replays_every_bundle_as_before(bundle: Path) -> None:
    assert _summary(_clean_replay(bundle)) == CLEAN_BUNDLE_FINGERPRINTS[bundle.name]


@pytest.mark.parametrize("name", sorted(CORPUS_RUNS))
def test_the_clean_engine_schedules_the_corpus_as_before(name: str) -> None:
    assert _summary(_corpus_run(name)) == CORPUS_FINGERPRINTS[name]


@pytest.mark.parametrize("name", sorted(GROUP_RUNS))
def test_the_clean_engine_schedules_the_groups_as_before(name: str) -> None:
    assert _summary(_groups_run(GROUP_RUNS[name])) == GROUP_FINGERPRINTS[name]


@pytest.mark.parametrize("mutant", sorted(MUTANT_RUNS))
def test_each_mutant_schedules_the_groups_as_before(mutant: str) -> None:
    assert _summary(_mutant_run(mutant)) == MUTANT_FINGERPRINTS[mutant]


def test_every_engine_mutant_is_pinned() -> None:
    from schedcheck.engines.reference.mutants import MUTANTS

    engine_mutants = {m.name for m in MUTANTS if m.component != "runner"}
    assert set(MUTANT_RUNS) == engine_mutants


def _print_current() -> None:
    tables = (
        ("CLEAN_BUNDLE_FINGERPRINTS", [(b.name, _clean_replay(b)) for b in _bundles()]),
        ("CORPUS_FINGERPRINTS", [(n, _corpus_run(n)) for n in sorted(CORPUS_RUNS)]),
        ("GROUP_FINGERPRINTS", [(n, _groups_run(GROUP_RUNS[n])) for n in sorted(GROUP_RUNS)]),
        ("MUTANT_FINGERPRINTS", [(m, _mutant_run(m)) for m in sorted(MUTANT_RUNS)]),
    )
    for table, rows in tables:
        print(f"{table}: dict[str, tuple[str, int, int]] = {{")
        for name, result in rows:
            print(f"    {name!r}: {_summary(result)!r},")
        print("}")


if __name__ == "__main__":
    _print_current()
