"""Every mutant of the catalog, one hand-written scenario each, through `schedcheck replay`:
the mutant's run names the right invariant, request and position (exit 1; exit 3 for the two
whose bug is a hang), and the clean engine replays the same scenario with no violation.
Each mutant's run reports the same with the shadow KV's common step in one compiled call
(sim/step_kernel.py) and without it.

Block size 4 throughout; `P((a, b), ...)` is the prompt a, a+1, ..., b-1 (then the next run).
"""

import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.reference.mutants import MUTANTS
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.sim.symbolic import SymbolicExecutor
from schedcheck.traces import TraceRequest, write_trace


def P(*runs):
    return tuple(t for lo, hi in runs for t in range(lo, hi))


def T(rid, arrival_s, prompt, **kw):
    return TraceRequest(rid, arrival_s, kw.pop("out", 2), prompt_token_ids=prompt, **kw)


SAME = P((100, 120))
# mutant -> (trace, engine options, expected (exit, invariant, request, position))
SCENARIOS = {
    # 20-token prompt in chunks of 6: the chunk ends inside block 1, which gets cached
    "cache-partial-block": ([T("a", 0, SAME), T("b", 0.01, SAME)],
                            {"max_num_batched_tokens": 6},
                            (1, "block-pool.cached-unwritten", "a", 4)),
    # the same 8 tokens (2 full blocks) again: a hit of all 8 leaves nothing to compute
    "no-cache-hit-cap": ([T("a", 0, P((100, 108))), T("b", 1.0, P((100, 108)))], {},
                         (3, "liveness", "b", -1)),
    # the first chunk (8 of 20) marks the whole prompt computed
    "whole-prompt-computed": ([T("a", 0, SAME), T("b", 0.01, SAME)],
                              {"max_num_batched_tokens": 8},
                              (1, "block-pool.cached-unwritten", "a", 8)),
    # two same prompts in one step, budget 10: block 2 is offered before anyone wrote it
    "same-step-cached": ([T("a", 0, P((100, 116))), T("b", 0, P((100, 116)))],
                         {"max_num_batched_tokens": 10},
                         (1, "block-pool.cached-unwritten", "a", 8)),
    # 16 tokens in chunks of 6: the last chunk ends on a block boundary
    "block-table-short": ([T("a", 0, P((100, 116)))], {"max_num_batched_tokens": 6},
                          (1, "accounting.block-table-short", "a", 11)),
    # 6 tokens + 3 drafts: the drafts of position 6..8 need a third block
    "no-lookahead-slots": ([T("a", 0, P((100, 106)))], {"num_lookahead_tokens": 3},
                           (1, "shadow-kv.write-out-of-bounds", "a", 8)),
    # c fails to get blocks, the cache changes, c retries with its stale hit count
    "stale-cache-hit": ([T("a", 0, P((100, 120)), out=8),
                         T("b", 0, P((100, 112), (300, 308)), out=8),
                         T("c", 0, P((100, 112), (400, 420)), out=8)],
                        {"num_gpu_blocks": 12, "max_num_batched_tokens": 8},
                        (1, "shadow-kv.read", "c", 16)),
    # a fully cached prompt whose length is a multiple of the block size
    "manager-computed-disagree": ([T("a", 0, P((100, 108))), T("b", 1.0, P((100, 108)))], {},
                                  (1, "accounting.manager-agreement", "b", 8)),
    # b's first block has the tokens of a's second block, under another parent
    "hash-no-parent": ([T("a", 0, P((100, 104), (200, 204), (1, 2))),
                        T("b", 1.0, P((200, 204), (1, 2)))], {},
                       (1, "shadow-kv.read", "b", 0)),
    # the same prompt under two cache salts
    "hash-ignores-salt": ([T("a", 0, P((100, 109)), cache_salt="x"),
                           T("b", 1.0, P((100, 109)), cache_salt="y")], {},
                          (1, "shadow-kv.read", "b", 0)),
    # three requests in 10 blocks: preemption, then the re-prefill drops the last output
    "resume-drops-last-token": ([T("a", 0, P((100, 112)), out=12), T("b", 0, P((200, 212)), out=12),
                                 T("c", 0, P((300, 312)), out=12)], {"num_gpu_blocks": 10},
                                (1, "accounting.num-tokens", "b", 20)),
    "slot-mapping-from-zero": ([T("a", 0, SAME)], {"max_num_batched_tokens": 8},
                               (1, "shadow-kv.read", "a", 0)),
    # b's first chunk runs beside a's second: b reads through a table of zeros (a's block 0)
    "block-table-hits-only": ([T("a", 0, SAME), T("b", 0.001, P((200, 204)))],
                              {"max_num_batched_tokens": 8}, (1, "shadow-kv.read", "b", 0)),
    # radix: two same prompts insert the same pages in one step
    "radix-leak-chunk-kv": ([T("a", 0, P((100, 112))), T("b", 0, P((100, 112)))],
                            {"block_manager": "radix"}, (1, "block-pool.leak", "", -1)),
    # radix: a aborted mid-chunk, its tree pages go back to the free pool, c hits them
    "radix-abort-frees-tree-pages": ([T("a", 0, SAME, abort_time_s=0.015),
                                      T("b", 0.02, P((500, 520))), T("c", 0.05, SAME)],
                                     {"block_manager": "radix", "max_num_batched_tokens": 6,
                                      "num_gpu_blocks": 12},
                                     (1, "block-pool.free-queue", "c", 0)),
    # radix: chunks of 2 tokens never complete a 4-token page
    "radix-prefix-not-advanced": ([T("a", 0, P((100, 108)))],
                                  {"block_manager": "radix", "long_prefill_token_threshold": 2},
                                  (1, "accounting.manager-agreement", "a", 0)),
    "seq-len-full-prompt": ([T("a", 0, SAME)], {"max_num_batched_tokens": 8},
                            (1, "shadow-kv.causal-alignment", "a", 0)),
    # b = a + 4 tokens: a hit of 8, then a chunk sized as if nothing were cached
    "chunk-before-prefix-hit": ([T("a", 0, P((100, 108))), T("b", 1.0, P((100, 108), (7, 11)))],
                                {}, (1, "accounting.range", "b", 12)),
    # 80 tokens need 20 blocks; the cache has 8
    "never-reject": ([T("a", 0, P((100, 180)))], {"num_gpu_blocks": 8},
                     (3, "liveness", "a", -1)),
    # K = 2 drafts, acceptance 0: both rejected, the rollback stops one short (at 8, not 7)
    "spec-rollback-off-by-one": ([T("a", 0, P((100, 106)), out=4)],
                                 {"num_speculative_tokens": 2, "draft_acceptance": 0.0},
                                 (1, "accounting.manager-agreement", "a", 7)),
    # a finishes on a step whose drafts were rejected; block 1 (keys 4..7) is cached with
    # draft KV at key 7; b, the next turn, hits it
    "cache-rejected-draft-block": ([T("a", 0, P((100, 106))),
                                    T("b", 0, P((300, 304)), parent_request_id="a")],
                                   {"num_speculative_tokens": 2, "draft_acceptance": 0.0},
                                   (1, "shadow-kv.read", "b", 7)),
}  # fmt: skip
BASE = {"block_size": 4, "num_gpu_blocks": 64, "max_num_batched_tokens": 32, "max_num_seqs": 8}
FLAGS = {"block_manager": "--block-manager", "num_gpu_blocks": "--num-gpu-blocks",
         "max_num_batched_tokens": "--max-num-batched-tokens",
         "long_prefill_token_threshold": "--long-prefill-token-threshold",
         "num_lookahead_tokens": "--num-lookahead-tokens",
         "num_speculative_tokens": "--num-speculative-tokens",
         "draft_acceptance": "--draft-acceptance"}  # fmt: skip


def test_every_mutant_has_a_scenario():
    assert sorted(SCENARIOS) == sorted(m.name for m in MUTANTS)


def _options(extra):
    opts = {**BASE, **extra}
    args = [
        "--block-size",
        str(opts.pop("block_size")),
        "--max-num-seqs",
        str(opts.pop("max_num_seqs")),
    ]
    for key, value in opts.items():
        args += [FLAGS[key], str(value)]
    return args


@pytest.mark.parametrize("mutant", sorted(SCENARIOS))
def test_replay_names_the_mutants_request_and_position(mutant, tmp_path):
    trace, extra, (code, invariant, request, position) = SCENARIOS[mutant]
    path = tmp_path / "trace.jsonl"
    write_trace(path, trace)
    bundle = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "schedcheck.cli", "replay", str(path), "--mutant", mutant,
           "--cost-profile", "unit", "--out", str(bundle), "--json", *_options(extra)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == code, proc.stderr
    out = json.loads(proc.stdout)
    if code == 3:
        assert out["violations"] == [] and request in out["stuck"]
        return
    first = out["violations"][0]
    assert (first["invariant"], first["request_id"], first["position"]) == (
        invariant,
        request,
        position,
    )
    assert (bundle / "violations.json").is_file()


@pytest.mark.parametrize("mutant", sorted(SCENARIOS))
def test_the_clean_engine_passes_the_same_scenario(mutant):
    trace, extra, _ = SCENARIOS[mutant]
    extra = dict(extra)
    options = SimOptions(draft_acceptance=float(extra.pop("draft_acceptance", 0.7)))
    config = EngineConfig(**{**BASE, **extra})
    res = run(trace, "reference", config, options, profile("unit"))
    done = res.finished + res.aborted + res.rejected
    assert (res.exit_code, res.violations, done) == (0, [], len(trace))


@pytest.mark.parametrize("mutant", sorted(SCENARIOS))
def test_the_mutants_run_reports_the_same_without_the_common_step(mutant):
    trace, extra, _ = SCENARIOS[mutant]
    extra = dict(extra)
    options = SimOptions(draft_acceptance=float(extra.pop("draft_acceptance", 0.7)))
    config = EngineConfig(**{**BASE, **extra, "mutant": mutant})

    def report():
        r = run(trace, "reference", config, options, profile("unit"))
        return r.fingerprint, r.violations, r.exit_code, r.invariants_checked, r.stuck, r.steps

    fused = report()
    with mock.patch.object(SymbolicExecutor, "use_common_step", False):
        assert report() == fused
