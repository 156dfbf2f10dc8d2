"""engines.registry.fit_config: configs moved to what the engine's own validation accepts
(each engine's declared fit_config), and the vLLM adapters' other declarations."""

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings

from schedcheck.engines.protocol import EngineConfig
from schedcheck.engines.registry import capabilities, fit_config
from schedcheck.engines.vllm.common import refuse_lookahead
from schedcheck.fuzz.scenario import scenarios
from schedcheck.fuzz.swarm import SwarmSpec


def test_reference_configs_are_unchanged():
    config = EngineConfig(max_num_batched_tokens=5, max_num_seqs=256, enable_chunked_prefill=False)
    assert fit_config("reference", config) is config


def test_vllm_caps_max_num_seqs_at_the_budget():
    config = EngineConfig(max_num_batched_tokens=5, max_num_seqs=256, num_gpu_blocks=9)
    fitted = fit_config("vllm-v1", config)
    assert (fitted.max_num_seqs, fitted.max_model_len) == (5, 131_072)
    assert fitted.num_gpu_blocks == 9


def test_vllm_without_chunked_prefill_takes_the_budget_as_max_model_len():
    config = EngineConfig(
        max_num_batched_tokens=48,
        max_num_seqs=4,
        enable_chunked_prefill=False,
        long_prefill_token_threshold=64,
    )
    fitted = fit_config("vllm-v0", config)
    assert (fitted.max_num_seqs, fitted.max_model_len) == (4, 48)
    assert fitted.long_prefill_token_threshold == 48


def test_vllm_turns_speculative_decoding_off_and_its_adapters_refuse_it():
    config = EngineConfig(num_lookahead_tokens=3)
    assert fit_config("vllm-v1", config).num_lookahead_tokens == 0
    assert fit_config("vllm-v0", config).num_lookahead_tokens == 0
    with pytest.raises(ValueError, match="num_lookahead_tokens=3: the vLLM adapters do not"):
        refuse_lookahead(config)
    refuse_lookahead(EngineConfig())


def test_spare_blocks():
    names = ("vllm-v1", "vllm-v0", "reference")
    assert [capabilities(n).spare_blocks for n in names] == [1, 1, 0]


def test_only_vllm_v0_has_no_cache_salt():
    names = ("vllm-v1", "vllm-v0", "reference")
    assert [capabilities(n).cache_salt for n in names] == [True, False, True]


@settings(max_examples=200, deadline=None)
@given(scenarios(SwarmSpec(engine="vllm-v1")))
def test_every_drawn_vllm_config_passes_vllms_checks(scenario):
    c = scenario.config
    assert c.max_num_batched_tokens >= c.max_num_seqs
    assert c.enable_chunked_prefill or c.max_num_batched_tokens >= c.max_model_len
    assert c.long_prefill_token_threshold <= c.max_model_len


def test_the_tiny_model_dir_is_removed_when_the_process_exits(tmp_path):
    """A campaign builds thousands of vLLM engines in many processes: none leaves a dir."""
    script = (
        "import os\n"
        "from schedcheck.engines.vllm.common import write_tiny_model_dir\n"
        "path = write_tiny_model_dir(64)\n"
        "assert write_tiny_model_dir(64) == path\n"
        "assert sorted(os.listdir(path)) == ['config.json']\n"
        "print(path)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    path = out.stdout.strip()
    assert path.startswith(str(tmp_path)) and os.path.basename(path).startswith(
        "schedcheck_vllm_model_"
    )
    assert not os.path.exists(path) and os.listdir(tmp_path) == []
