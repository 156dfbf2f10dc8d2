"""The vllm-v0 adapter: vLLM 0.5.4 or 0.6.0's real Scheduler with block manager v1 or v2,
and the engine's own output processing (per-era shims in `eras.py`).

    factory.py   registry entry point; declares capabilities
    fit.py       fit_config (no vLLM import at module level)
    eras.py      the era table and its shims (vLLM imported inside functions only)
    adapter.py   the Engine protocol over the Scheduler (imports vLLM)
    build.py     builds the Scheduler and output processor (imports vLLM)
    runner.py    the model runner's context_len / seq_len per release (no vLLM)
    snapshot.py  KVSnapshot over the block manager (imports vLLM)
"""
