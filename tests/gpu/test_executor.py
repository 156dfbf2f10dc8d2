"""The executor as the engine loop uses it: the Executor protocol, by the factory's name."""

from __future__ import annotations

import importlib

import numpy as np
import torch

from schedcheck.engines.executor import Executor
from schedcheck.engines.metadata import build_metadata
from schedcheck.engines.protocol import ScheduledRequest, SchedulerOutput
from schedcheck.gpu.model import ModelConfig

BS = 4
PROMPT = np.arange(3, 9, dtype=np.int64)  # 6 tokens


def _factory():
    module, _, attr = "schedcheck.gpu.executor:make_executor".partition(":")
    return getattr(importlib.import_module(module), attr)


def _executor(**kw):
    return _factory()(
        backend="torch-ref",
        device="cpu",
        dtype="fp32",
        block_size=BS,
        num_blocks=8,
        seed=0,
        model_config=ModelConfig(vocab_size=512),
        **kw,
    )


def _step(step: int, computed: int, chunk: np.ndarray, table: tuple[int, ...]):
    end = computed + chunk.size
    req = ScheduledRequest(
        "r", computed, chunk.size, max(end, PROMPT.size), PROMPT.size, chunk, table
    )
    return build_metadata(SchedulerOutput(step, (req,)), BS)


def test_live_steps_sample_and_extend_the_oracle() -> None:
    ex = _executor()
    assert all(callable(getattr(ex, name)) for name in vars(Executor) if not name.startswith("_"))
    ex.add_request("r", PROMPT)
    first = ex.execute(_step(0, 0, PROMPT[:4], (2,)))
    assert first == {}  # a non-final chunk samples nothing
    sampled = ex.execute(_step(1, 4, PROMPT[4:], (2, 5)))
    token = sampled["r"]
    assert 0 <= token < 512 and ex.tokens["r"].tolist() == [*PROMPT.tolist(), token]
    again = ex.execute(_step(2, 6, np.array([token]), (2, 5)))
    assert set(again) == {"r"} and ex.findings == [] and ex.violations == []
    ids, complete = ex.block_contents(np.array([2, 5]))
    assert complete.tolist() == [True, False] and ids[0] != 0
    ex.finish_request("r")
    assert "r" not in ex.tokens


def test_same_seed_same_tokens() -> None:
    runs = []
    for _ in range(2):
        ex = _executor()
        ex.add_request("r", PROMPT)
        runs.append(ex.execute(_step(0, 0, PROMPT, (1, 3))))
    assert runs[0] == runs[1]


def test_bad_slot_and_block_are_findings_not_crashes() -> None:
    ex = _executor()
    ex.add_request("r", PROMPT)
    sampled = ex.execute(_step(0, 0, PROMPT, (1, 99)))  # block 99 of 8
    assert set(sampled) == {"r"}
    kinds = sorted(v.invariant for v in ex.violations)
    assert kinds == ["tensor.block-invalid", "tensor.slot-invalid"]
    assert {v.position for v in ex.violations} == {4}
    assert torch.count_nonzero(ex.cache.key_cache[0][ex.cache.zero_block_id]) == 0


def test_the_engine_loop_runs_live_on_the_tensor_executor() -> None:
    from schedcheck.engines.protocol import EngineConfig
    from schedcheck.sim.loop import SimOptions, run
    from schedcheck.traces.schema import TraceRequest

    shared = tuple(range(5, 21))
    trace = [TraceRequest("a", 0.0, 4, prompt_token_ids=(*shared, 22, 23)),
             TraceRequest("b", 0.0, 3, prompt_token_ids=(*shared, 40))]  # fmt: skip
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=8)
    options = SimOptions(executor="tensor", executor_options={
        "backend": "torch-ref", "device": "cpu", "dtype": "fp32", "seed": 0,
        "model_config": ModelConfig(vocab_size=512)})  # fmt: skip
    result = run(trace, "reference", config, options)
    assert result.finished == 2 and result.violations == []
    assert all(0 <= t < 512 for out in result.outputs.values() for t in out)


class _Written:
    """Observer: keeps each step's per-layer (K, V) of every row."""

    def __init__(self) -> None:
        self.written: list = []

    def on_step(self, plan, tensors, written, hidden, logits, tokens, executor) -> None:
        self.written = [(k.clone(), v.clone()) for k, v in written]


def test_drafts_write_the_sampled_rows_kv_past_its_position_and_are_overwritten() -> None:
    """6 prompt tokens in blocks (1, 3), 2 drafts: slots 3*4+2 and 3*4+3 (positions 6, 7)
    get the K/V of the sampled row (position 5); the decode of position 6 then writes its
    own K/V over the first (its drafts, positions 7 and 8, need a third block: 4)."""
    watch = _Written()
    ex = _executor(observer=watch)
    ex.add_request("r", PROMPT)
    md = build_metadata(
        SchedulerOutput(0, (ScheduledRequest("r", 0, 6, 6, 6, PROMPT, (1, 3)),)),
        BS,
        num_lookahead_tokens=2,
    )
    token = ex.execute(md)["r"]
    for layer, (k, v) in enumerate(watch.written):
        keys = ex.cache.key_cache[layer].view(-1, *k.shape[1:])
        values = ex.cache.value_cache[layer].view(-1, *v.shape[1:])
        assert torch.equal(keys[14], k[5]) and torch.equal(keys[15], k[5])
        assert torch.equal(values[15], v[5])
    decode = ScheduledRequest("r", 6, 1, 7, 6, np.array([token]), (1, 3, 4))
    ex.execute(build_metadata(SchedulerOutput(1, (decode,)), BS, num_lookahead_tokens=2))
    k_decode = watch.written[0][0]
    keys = ex.cache.key_cache[0].view(-1, *k_decode.shape[1:])
    assert torch.equal(keys[14], k_decode[0]) and ex.findings == []
