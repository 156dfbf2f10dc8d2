"""A user's engine whose factory cannot build it (a wrong path in the user's environment)."""

from schedcheck.engines.protocol import EngineConfig


def make_engine(config: EngineConfig):
    from nano_vllm_not_installed.engine import Scheduler  # noqa: F401  (the user's typo)

    raise AssertionError("not reached")
