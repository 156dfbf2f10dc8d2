"""sim/meets.py: this package's engines meet the same runtime protocols in every instance,
so the answer remembered for their class is each instance's; other engines are checked
every time."""

import pytest

from schedcheck.engines.protocol import EngineConfig, SpecDecodeEngine
from schedcheck.engines.registry import make_engine
from schedcheck.sim import meets as meets_module
from schedcheck.sim.coverage import RarePathCounter
from schedcheck.sim.faults import FaultInjectable
from schedcheck.sim.meets import meets
from schedcheck.sim.pipelined import AsyncSchedulingEngine

PROTOCOLS = (FaultInjectable, RarePathCounter, SpecDecodeEngine, AsyncSchedulingEngine)
CONFIGS = (
    EngineConfig(),
    EngineConfig(block_manager="radix", enable_prefix_caching=False),
    EngineConfig(num_speculative_tokens=2),
    EngineConfig(extra={"async_scheduling": "true"}),
)


@pytest.mark.parametrize("config", CONFIGS, ids=["hashed", "radix", "spec", "async"])
def test_a_reference_engine_meets_what_its_class_was_found_to_meet(config):
    engine = make_engine("reference", config)
    assert type(engine).__module__.startswith("schedcheck.engines.")
    for protocol in PROTOCOLS:
        assert meets(engine, protocol) == isinstance(engine, protocol)
        assert meets_module._ANSWERS[(type(engine), protocol)] == isinstance(engine, protocol)
    assert meets(engine, FaultInjectable) and meets(engine, AsyncSchedulingEngine)


def test_an_engine_of_another_package_is_checked_every_time():
    class Engine:  # a user's: one instance grows the method after it was built
        pass

    plain, grown = Engine(), Engine()
    grown.inject_fault = lambda kind, rng: None
    assert meets(grown, FaultInjectable) and not meets(plain, FaultInjectable)
    assert not any(kind is Engine for kind, _ in meets_module._ANSWERS)
