"""Async scheduling with drafts, configured as production does on each release (issue #28
item 2): vLLM's n-gram proposer where the release runs it with async scheduling, else an
EAGLE draft model (a tiny config, never loaded; the simulator still proposes the drafts);
refused only where vLLM itself runs neither (0.11.0: its AsyncScheduler schedules no
drafts). Before, 0.12.0 refused the pair ("only supported with EAGLE/MTP") and the fuzzer
never drew it there.
"""

from __future__ import annotations

import dataclasses

import pytest
from vllm_driver import NEEDS_VLLM_V1, request, run_step, skip_unless_drafts, vllm_version

from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY, EngineConfig
from schedcheck.engines.vllm.v1 import eras
from schedcheck.engines.vllm.v1.fit import fit_config_v1

pytestmark = NEEDS_VLLM_V1

CONFIG = EngineConfig(
    block_size=4,
    num_gpu_blocks=64,
    max_num_batched_tokens=32,
    max_num_seqs=4,
    max_model_len=64,
    num_speculative_tokens=3,
    kv_groups="full,sliding:6",
    extra={ASYNC_SCHEDULING_KEY: "true"},
)


def _method() -> str | None:
    from schedcheck.engines.vllm.v1.adapter import make_engine

    return eras.async_draft_method(make_engine)


def test_async_drafts_run_with_the_method_production_uses():
    skip_unless_drafts()
    from schedcheck.engines.registry import make_engine

    method = _method()
    if method is None:
        with pytest.raises(ValueError, match="does not run async scheduling with drafts"):
            make_engine("vllm-v1", CONFIG)
        return
    engine = make_engine("vllm-v1", CONFIG)
    named = engine.config.extra.get(eras.DRAFT_METHOD_KEY, "ngram")
    assert named == method
    speculative = engine.scheduler.vllm_config.speculative_config
    assert speculative.method == method
    engine.add_request(request("a", range(10, 20), 6))
    drafts = []
    for _ in range(6):  # bounded: the prefill, then decodes
        out = engine.schedule()  # async: scheduled before the last step's update
        drafts += [r.num_draft_tokens for r in out.scheduled if r.num_draft_tokens]
        if out.scheduled:
            tokens = {r.request_id: 1000 + out.step for r in out.scheduled if r.samples}
            engine.update_from_output(out, tokens)
    assert drafts, f"vLLM {vllm_version()} ({method}) scheduled no draft"


def test_fit_names_the_draft_model_where_the_release_needs_one():
    skip_unless_drafts()
    method = _method()
    fitted = fit_config_v1(CONFIG)
    if method is None:
        assert fitted.num_speculative_tokens == 0
    elif method == "ngram":
        assert eras.DRAFT_METHOD_KEY not in fitted.extra  # the config as before
        assert fitted.num_speculative_tokens == 3
    else:
        assert fitted.extra[eras.DRAFT_METHOD_KEY] == method
        assert fitted.num_speculative_tokens == 3


def test_sync_drafts_stay_ngram():
    skip_unless_drafts()
    from schedcheck.engines.registry import make_engine

    sync = dataclasses.replace(CONFIG, extra={}, kv_groups="full")
    engine = make_engine("vllm-v1", sync)
    assert engine.scheduler.vllm_config.speculative_config.method == "ngram"
    assert eras.DRAFT_METHOD_KEY not in engine.config.extra
    engine.add_request(request("a", range(10, 20), 2))
    run_step(engine)
