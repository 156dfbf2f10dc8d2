"""What the loop may ask of each executor beyond the Executor protocol (sim/executors.py)."""

import numpy as np
import pytest

from schedcheck.engines.protocol import EngineConfig
from schedcheck.sim.executors import (
    DraftVerifier,
    ExecutorParts,
    HashModelSampler,
    PoolContents,
    ReportingExecutor,
    ShadowKV,
    make_executor,
)
from schedcheck.sim.hash_executor import HashModelExecutor
from schedcheck.sim.result import SimOptions
from schedcheck.sim.symbolic import SymbolicExecutor

CFG = EngineConfig(block_size=4, num_gpu_blocks=8)
PROTOCOLS = (ReportingExecutor, ShadowKV, DraftVerifier, PoolContents, HashModelSampler)


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


@pytest.mark.parametrize(
    "make",
    [
        lambda: SymbolicExecutor(8, 4),
        lambda: SymbolicExecutor(1, 1, vocab_size=300),
        lambda: HashModelExecutor(),
        lambda: HashModelExecutor(300),
    ],
)
def test_a_built_in_executors_parts_are_its_classs_as_each_instance_checks(make):
    """The parts of a built-in executor are found once per class: any instance, whatever
    its arguments, meets the same protocols as that answer says."""
    from schedcheck.sim import executors, meets

    def offered(parts):
        return [p is not None for p in (parts.shadow, parts.drafts, parts.pool)]

    executor = make()
    first, second = ExecutorParts.of(executor), ExecutorParts.of(make())  # second: remembered
    assert offered(first) == offered(second) and first.run is executor
    assert first.hash_model_tokens == second.hash_model_tokens
    remembered = [meets._ANSWERS[(type(executor), p)] for p in PROTOCOLS]
    assert remembered == [isinstance(executor, p) for p in PROTOCOLS]
    assert executors._parts(make()) == executors._parts(executor)


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
