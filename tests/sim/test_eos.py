"""The model's EOS (SimOptions.eos_token_id): requests stop at the first EOS they sample."""

import dataclasses

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig, FinishedRequest
from schedcheck.engines.reference import request as reference_request
from schedcheck.invariants.outputs import check_finished, until_eos
from schedcheck.sim.arrivals import Release
from schedcheck.sim.bundles import run_config
from schedcheck.sim.cost_model import profile
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.loop import run
from schedcheck.sim.result import RunResult, SimOptions
from schedcheck.traces.schema import TraceRequest
from schedcheck.traces.tokens import FIRST_TOKEN_ID

EOS = FIRST_TOKEN_ID + 1
OPTIONS = SimOptions(vocab_size=FIRST_TOKEN_ID + 5, eos_token_id=EOS)  # a stop in 1 of 5
CONFIG = EngineConfig(num_gpu_blocks=64, block_size=4, max_num_batched_tokens=32)


def _trace() -> list[TraceRequest]:
    """Six requests, and a later turn of r1 read while r1 runs (a vLLM session continues
    it); also the trace of tests/vllm and tests/sglang's EOS tests."""
    requests = [
        TraceRequest(
            f"r{i}",
            0.01 * i,
            12,
            prompt_token_ids=tuple(range(1000 * (i + 1), 1000 * (i + 1) + 20 + i)),
        )
        for i in range(6)
    ]
    later = TraceRequest("r1b", 0.01, 9, prompt_token_ids=(5,), parent_request_id="r1")
    return [*requests[:2], later, *requests[2:]]


def test_until_eos_cuts_after_the_first_eos_only():
    assert until_eos((5, 4, 6, 4), 4) == (5, 4)
    assert until_eos([5, 6], 4) == [5, 6]
    assert until_eos((5, 4), None) == (5, 4)


def test_the_ledger_keeps_no_token_past_the_eos():
    result = RunResult("reference", EngineConfig(), OPTIONS, profile("unit"))
    ledger = Ledger(2, result, lambda rid, done: None)
    request = TraceRequest("a", 0.0, 5, prompt_token_ids=(7, 8))
    engine_request = ledger.admit(Release(request, np.array([7, 8], np.int64)), 0.0)
    assert engine_request.eos_token_id == EOS
    assert ledger.gain("a", (6, EOS, 7)) == (6, EOS)  # drafts accepted past it: dropped
    assert ledger.gain("a", (6,)) == ()
    ledger.gain_all({"a": 6}, {}, kept=False)  # the one-token path stops there too
    assert ledger.sampled["a"] == [6, EOS]


def _finished(reason: str, outputs: tuple[int, ...]) -> list[str]:
    prompt = np.arange(10, dtype=np.int64)
    sampled = np.asarray(outputs, np.int64)
    out = check_finished(
        3,
        FinishedRequest("r", outputs, reason),
        prompt,
        sampled,
        4,
        64,
        unchunked=False,
        eos_token_id=EOS,
    )
    return [v.invariant for v in out]


def test_a_stop_ends_with_the_eos_and_a_length_does_not():
    assert _finished("stop", (6, EOS)) == []
    assert _finished("length", (6, 7, 8, 9)) == []
    assert _finished("stop", (6, 7)) == ["outputs.stop"]
    assert _finished("stop", ()) == ["outputs.stop"]
    assert _finished("length", (6, 7, 8, EOS)) == ["outputs.stop"]  # EOS is checked first


@pytest.mark.parametrize(
    "changes",
    [{}, {"num_speculative_tokens": 3}, {"extra": {"async_scheduling": "true"}}],
    ids=["sync", "drafts", "async"],
)
def test_the_reference_engine_stops_each_request_at_its_first_eos(changes):
    result = run(
        _trace(), "reference", dataclasses.replace(CONFIG, **changes), OPTIONS, profile("unit")
    )
    assert result.violations == [] and result.finished == 7
    assert result.coverage["eos-stop"] == 7  # every request sampled an EOS before 12 tokens
    for rid, outputs in result.outputs.items():
        assert outputs.count(EOS) == 1 and outputs[-1] == EOS, rid
    assert result.outputs["r1"] == [FIRST_TOKEN_ID, FIRST_TOKEN_ID + 4, EOS]


def test_an_engine_that_ignores_the_eos_is_caught(monkeypatch):
    made = reference_request.Request.__init__

    def deaf(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.eos_token_id = None

    monkeypatch.setattr(reference_request.Request, "__init__", deaf)
    result = run(_trace(), "reference", CONFIG, OPTIONS, profile("unit"))
    found = [(v.invariant, v.request_id) for v in result.violations]
    # it schedules the token after the EOS, which the request never gained
    assert found == [("accounting.num-tokens", "r0"), ("accounting.num-tokens", "r1")]


def test_a_bundle_names_the_eos_only_when_set():
    assert (
        "eos_token_id"
        not in run_config(run(_trace()[:1], "reference", CONFIG, SimOptions(), profile("unit")))[
            "sim"
        ]
    )
    sim = run_config(run(_trace()[:1], "reference", CONFIG, OPTIONS, profile("unit")))["sim"]
    assert (sim["eos_token_id"], sim["vocab_size"]) == (EOS, FIRST_TOKEN_ID + 5)


def test_an_eos_the_model_never_samples_is_refused():
    with pytest.raises(AssertionError, match="not a token the model samples"):
        SimOptions(vocab_size=FIRST_TOKEN_ID + 5, eos_token_id=FIRST_TOKEN_ID + 5)


def test_a_bundle_with_an_eos_is_refused_by_vllms_kernel_replay(tmp_path):
    from schedcheck.cli.commands.verify_vllm import verify_bundle_on_vllm
    from schedcheck.sim.bundles import save_bundle

    result = run(
        _trace()[:1],
        "reference",
        CONFIG,
        dataclasses.replace(OPTIONS, record_schedule=True),
        profile("unit"),
    )
    bundle = save_bundle(tmp_path / "bundle", result)
    with pytest.raises(
        ValueError, match="its requests stop at an EOS; vllm-engine drives no EOS stops"
    ):
        verify_bundle_on_vllm(bundle)
