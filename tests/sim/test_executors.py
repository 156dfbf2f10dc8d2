"""What the loop may ask of each executor beyond the Executor protocol (sim/executors.py)."""

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.executors import ExecutorParts, make_executor
from schedcheck.sim.hash_executor import HashModelExecutor
from schedcheck.sim.result import SimOptions
from schedcheck.sim.symbolic import SymbolicExecutor

CFG = EngineConfig(block_size=4, num_gpu_blocks=8)


def test_the_symbolic_executor_offers_every_part():
    parts = make_executor(SimOptions(), CFG)
    assert isinstance(parts.run, SymbolicExecutor)
    assert parts.shadow is parts.run and parts.drafts is parts.run and parts.pool is parts.run
    assert parts.hash_model_tokens


def test_the_bare_executor_offers_only_hash_model_tokens():
    parts = make_executor(SimOptions(executor="hash"), CFG)
    assert isinstance(parts.run, HashModelExecutor)
    assert (parts.shadow, parts.drafts, parts.pool) == (None, None, None)
    assert parts.hash_model_tokens and parts.run.violations == []
    contents, complete = parts.block_contents(np.arange(3))  # no shadow: nothing to check
    assert contents.tolist() == [0, 0, 0] and complete.tolist() == [True, True, True]


def test_an_object_that_cannot_execute_is_no_executor():
    with pytest.raises(TypeError, match="object is no executor"):
        ExecutorParts.of(object())


def test_several_kv_cache_groups_need_the_shadow_kv():
    hybrid = EngineConfig(block_size=4, num_gpu_blocks=8, kv_groups="full,sliding:8")
    with pytest.raises(ValueError, match="only the symbolic executor reads several"):
        make_executor(SimOptions(executor="hash"), hybrid)
    assert make_executor(SimOptions(), hybrid).shadow is not None


def test_an_unknown_executor_is_refused():
    with pytest.raises(ValueError, match="unknown executor 'gpu'"):
        make_executor(SimOptions(executor="gpu"), CFG)
