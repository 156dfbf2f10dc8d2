"""A 1,000-request generated trace through both block managers: same sampled tokens.

Requests are built directly with numpy from a seeded generator: 30% share one of a few
system prompts (some of them exact multiples of the block size), 20% continue an earlier
request's prompt (a conversation prefix), the rest are unique. Arrivals come in bursts over
the run, about 2% are aborted mid-way, and the cache is small enough that requests are
preempted. The shadow driver (refengine_helpers.ShadowDriver) checks every write and read
of every step, and a request's tokens depend on its content only: both managers must emit
exactly `ideal_outputs` for every request that was not aborted.
"""

from __future__ import annotations

import numpy as np
import pytest
from refengine_helpers import ShadowDriver, engine, ideal_outputs, request

from schedcheck.engines.protocol import EngineRequest

NUM_REQUESTS = 1_000
BLOCK_SIZE = 8
NUM_GPU_BLOCKS = 160


def generate_trace(seed: int) -> tuple[list[list[EngineRequest]], dict[int, list[str]]]:
    """Arrivals per step and aborts per step (request ids), from one seeded generator."""
    rng = np.random.default_rng(seed)
    system_prompts = [rng.integers(0, 1_000, n) for n in (8, 16, 24, 37, 64, 100)]
    prompts: list[np.ndarray] = []
    arrivals: list[list[EngineRequest]] = []
    aborts: dict[int, list[str]] = {}
    index = 0
    step_index = 0
    while index < NUM_REQUESTS:
        burst = int(rng.integers(0, 6))
        batch = []
        for _ in range(min(burst, NUM_REQUESTS - index)):
            kind = rng.random()
            suffix = rng.integers(0, 1_000, int(rng.integers(1, 60)))
            if kind < 0.3:
                prefix = system_prompts[int(rng.integers(len(system_prompts)))]
            elif kind < 0.5 and prompts:
                earlier = prompts[int(rng.integers(len(prompts)))]
                prefix = earlier[: int(rng.integers(1, earlier.size + 1))]
            else:
                prefix = np.zeros(0, dtype=np.int64)
            prompt = np.concatenate([prefix, suffix]).astype(np.int64)
            if rng.random() < 0.1:
                prompt = prompt[: max(BLOCK_SIZE, prompt.size // BLOCK_SIZE * BLOCK_SIZE)]
            prompts.append(prompt)
            rid = f"req-{index}"
            batch.append(request(rid, prompt, max_tokens=int(rng.integers(1, 24))))
            if rng.random() < 0.02:
                aborts.setdefault(step_index + int(rng.integers(1, 40)), []).append(rid)
            index += 1
        arrivals.append(batch)
        step_index += 1
    return arrivals, aborts


def run_trace(block_manager: str, seed: int) -> tuple[ShadowDriver, set[str], int, int]:
    arrivals, aborts = generate_trace(seed)
    eng = engine(
        block_manager,
        block_size=BLOCK_SIZE,
        num_gpu_blocks=NUM_GPU_BLOCKS,
        max_num_batched_tokens=256,
        max_num_seqs=48,
        long_prefill_token_threshold=96,
    )
    driver = ShadowDriver(eng, BLOCK_SIZE, NUM_GPU_BLOCKS)
    aborted: set[str] = set()
    num_preempted = 0
    num_hit_tokens = 0
    steps_max = 20_000
    for step_index in range(steps_max):
        for req in arrivals[step_index] if step_index < len(arrivals) else ():
            driver.add(req)
        for rid in aborts.get(step_index, ()):
            if rid in driver.true_tokens and rid not in driver.finished:
                driver.abort(rid)
                aborted.add(rid)
        if step_index >= len(arrivals) and not eng.has_unfinished_requests():
            break
        output = driver.step()
        num_preempted += len(output.preempted_req_ids)
        num_hit_tokens += sum(r.num_cached_tokens for r in output.scheduled)
    assert not eng.has_unfinished_requests(), eng.waiting_reasons()
    return driver, aborted, num_preempted, num_hit_tokens


@pytest.mark.parametrize("seed", [0])
def test_thousand_requests_identical_tokens_both_managers(seed):
    arrivals, _ = generate_trace(seed)
    requests = {r.request_id: r for batch in arrivals for r in batch}
    assert len(requests) == NUM_REQUESTS
    results = {}
    for block_manager in ("hashed", "radix"):
        driver, aborted, num_preempted, num_hit_tokens = run_trace(block_manager, seed)
        assert driver.read_errors == []
        assert len(driver.finished) == NUM_REQUESTS
        assert num_preempted > 0, "the cache is meant to be small enough to preempt"
        assert num_hit_tokens > 5_000, "shared prefixes are meant to hit the cache"
        reasons = {f.reason for f in driver.finished.values()}
        assert reasons <= {"length", "abort"}
        results[block_manager] = (driver, aborted)
    hashed, hashed_aborted = results["hashed"]
    radix, radix_aborted = results["radix"]
    assert hashed_aborted == radix_aborted and 0 < len(hashed_aborted) < 60
    for rid, req in requests.items():
        if rid in hashed_aborted:
            continue
        ideal = ideal_outputs(req.prompt_token_ids, req.max_tokens)
        assert list(hashed.finished[rid].output_token_ids) == ideal, rid
        assert list(radix.finished[rid].output_token_ids) == ideal, rid
