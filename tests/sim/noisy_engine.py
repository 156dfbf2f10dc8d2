"""The toy engine, talking on standard output the ways real engines do: vLLM's logger (a
handler that holds the `sys.stdout` of its import), SGLang's `print` of its radix tree, and
C code writing to file descriptor 1. `--json` must stay parseable whatever it prints."""

from __future__ import annotations

import logging
import os
import sys

from toy_engine import ToyEngine

from schedcheck.engines.protocol import EngineConfig, SchedulerOutput

_LOG = logging.getLogger("noisy_engine")
_LOG.setLevel(logging.INFO)
_LOG.addHandler(logging.StreamHandler(sys.stdout))  # as vLLM's logging config does
_LOG.propagate = False


class NoisyEngine(ToyEngine):
    name = "noisy"

    def schedule(self) -> SchedulerOutput:
        output = super().schedule()
        _LOG.info("INFO noisy: step %d scheduled %d requests", output.step, len(output.scheduled))
        print(f"noisy radix tree at step {output.step}: {{}}")
        os.write(1, b"noisy C extension line\n")
        return output


def make_engine(config: EngineConfig) -> NoisyEngine:
    return NoisyEngine(config)
