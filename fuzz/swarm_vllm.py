"""The vLLM v1 scheduler options the swarm draws for `--engine vllm-v1` (every family) and
`--engine vllm-engine` (all but async: `VLLM_ENGINE_FAMILIES`), by family.

Each family is drawn on or off per example (off shrinks first, to vLLM's defaults; on in
every example for a family named by `--family`, a campaign per family), and
its options are written to `EngineConfig.extra` (`policy`, `async_scheduling`, and
`vllm:<SchedulerConfig field>`, see engines/vllm/v1/options.py); `fit_config` then moves
them to what vLLM's validation accepts (engines/vllm/v1/fit.py).

    family     options (vLLM 0.33 SchedulerConfig)
    priority   policy "priority" (traces then carry drawn priorities)
    async      async_scheduling (AsyncScheduler, pipeline depth 2 in the loop)
    budget     max_num_scheduled_tokens, long_prefill_token_threshold_adaptive,
               prefill_schedule_interval
    admission  watermark, scheduler_reserve_full_isl False, max_num_active_seqs,
               cache_aware_admission_window / _threshold (0.34: fcfs + prefix caching only)
    queue      max_num_queued_reqs, max_num_queued_tokens (the API server's 503)
    streaming  streaming_input: every request a resumable session, a later turn continuing
               its parent's (engines/vllm/v1/sessions.py; 0.34.0 on, fit drops it before);
               "queued" in half: a later turn arriving while its parent runs sends its input
               at once, which vLLM queues in the session (its streaming_queue)
"""

from __future__ import annotations

from hypothesis import strategies as st

from schedcheck.engines.protocol import ASYNC_SCHEDULING_KEY
from schedcheck.engines.vllm.v1.sessions import STREAMING_INPUT_KEY, STREAMING_INPUT_MODES
from schedcheck.fuzz.strategies import BOOLEANS, draw_boundary_length, family_on, pick

VLLM_FAMILIES = ("priority", "async", "budget", "admission", "queue", "streaming")
# vLLM's whole engine on a CPU: its CPU platform turns async scheduling off
VLLM_ENGINE_FAMILIES = ("priority", "budget", "admission", "queue")
WATERMARKS = ("0.01", "0.1", "0.25", "0.5")
PREFILL_INTERVALS = ("2", "3", "5")
ACTIVE_SEQS = ("1", "2", "3")
CACHE_AWARE_WINDOWS = ("1", "2", "4", "8")  # waiting requests looked past (short queues)
CACHE_AWARE_THRESHOLDS = ("0.0", "0.5", "0.9")  # KV usage below which the window is off
QUEUED_REQS = ("1", "2", "3", "5")
Extra = tuple[tuple[str, str], ...]


def draw_vllm_v1_extra(
    draw: st.DrawFn,
    families: tuple[str, ...],
    block_size: int,
    blocks_max: int,
    drawable: tuple[str, ...] = VLLM_FAMILIES,
) -> Extra:
    """The options of every family drawn on (those in `families` always, the others in
    half the examples), as sorted EngineConfig.extra pairs; only the `drawable` families
    (the engine's: vllm-engine has no async scheduling) are drawn at all."""
    extra: dict[str, str] = {}
    for family in VLLM_FAMILIES:  # a fixed order: the same draws for the same choices
        if family not in drawable:
            continue
        if family_on(draw, families, family):
            extra.update(_DRAWS[family](draw, block_size, blocks_max))
    return tuple(sorted(extra.items()))


def _priority(draw: st.DrawFn, block_size: int, blocks_max: int) -> dict[str, str]:
    return {"policy": "priority"}


def _async(draw: st.DrawFn, block_size: int, blocks_max: int) -> dict[str, str]:
    return {ASYNC_SCHEDULING_KEY: "true"}


def _budget(draw: st.DrawFn, block_size: int, blocks_max: int) -> dict[str, str]:
    out = {}
    if draw(BOOLEANS):
        tokens = draw_boundary_length(draw, block_size, blocks_max, 1)
        out["vllm:max_num_scheduled_tokens"] = str(tokens)
    if draw(BOOLEANS):
        out["vllm:long_prefill_token_threshold_adaptive"] = "true"
    if draw(BOOLEANS):
        out["vllm:prefill_schedule_interval"] = pick(draw, PREFILL_INTERVALS)
    return out


def _admission(draw: st.DrawFn, block_size: int, blocks_max: int) -> dict[str, str]:
    out = {}
    if draw(BOOLEANS):
        out["vllm:watermark"] = pick(draw, WATERMARKS)
    if draw(BOOLEANS):
        out["vllm:scheduler_reserve_full_isl"] = "false"
    if draw(BOOLEANS):
        out["vllm:max_num_active_seqs"] = pick(draw, ACTIVE_SEQS)
    if draw(BOOLEANS):
        out["vllm:cache_aware_admission_window"] = pick(draw, CACHE_AWARE_WINDOWS)
        out["vllm:cache_aware_admission_threshold"] = pick(draw, CACHE_AWARE_THRESHOLDS)
    return out


def _queue(draw: st.DrawFn, block_size: int, blocks_max: int) -> dict[str, str]:
    out = {}
    if draw(BOOLEANS):
        out["vllm:max_num_queued_reqs"] = pick(draw, QUEUED_REQS)
    if draw(BOOLEANS):
        tokens = draw_boundary_length(draw, block_size, blocks_max, 1)
        out["vllm:max_num_queued_tokens"] = str(tokens)
    return out


def _streaming(draw: st.DrawFn, block_size: int, blocks_max: int) -> dict[str, str]:
    return {STREAMING_INPUT_KEY: pick(draw, STREAMING_INPUT_MODES)}


_DRAWS = {
    "priority": _priority,
    "async": _async,
    "budget": _budget,
    "admission": _admission,
    "queue": _queue,
    "streaming": _streaming,
}
