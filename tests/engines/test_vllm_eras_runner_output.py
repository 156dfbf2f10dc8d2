"""eras.runner_output reads a ModelRunnerOutput class's shape once per class and still gives
each step fresh empty containers (no vLLM needed: stand-in dataclasses of two eras)."""

from __future__ import annotations

import dataclasses

import numpy as np

from schedcheck.engines.vllm.v1 import eras


@dataclasses.dataclass
class OldOutput:  # an early 0.1x: req_id_to_index, and four fields with no default
    req_ids: list[str]
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]]
    spec_token_ids: list[list[int]] | None
    logprobs: object | None
    prompt_logprobs_dict: dict[str, object]
    pooler_output: list[object]


@dataclasses.dataclass
class ArrayOutput:  # 0.11.1: sampled tokens as arrays, the rest defaulted
    req_ids: list[str]
    sampled_token_ids: list[np.ndarray]
    pooler_output: list[object] = dataclasses.field(default_factory=list)


def test_an_old_output_gets_its_index_and_a_fresh_empty_value_per_required_field():
    first = eras.runner_output(OldOutput, ["a", "b"], [[5], []])
    second = eras.runner_output(OldOutput, ["c"], [[7]])
    assert first == OldOutput(["a", "b"], {"a": 0, "b": 1}, [[5], []], None, None, {}, [])
    assert second == OldOutput(["c"], {"c": 0}, [[7]], None, None, {}, [])
    assert first.prompt_logprobs_dict is not second.prompt_logprobs_dict
    assert first.pooler_output is not second.pooler_output


def test_an_array_output_gets_int64_arrays_and_its_defaults():
    out = eras.runner_output(ArrayOutput, ["a", "b"], [[5, 6], []])
    assert out.req_ids == ["a", "b"]
    assert [t.dtype for t in out.sampled_token_ids] == [np.int64, np.int64]
    assert [t.tolist() for t in out.sampled_token_ids] == [[5, 6], []]
    assert out.pooler_output == []
    assert eras._runner_output_shape(ArrayOutput) == (True, False, ())
    assert eras._runner_output_shape(OldOutput) == (
        False,
        True,
        ("spec_token_ids", "logprobs", "prompt_logprobs_dict", "pooler_output"),
    )
