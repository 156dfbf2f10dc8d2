"""The vllm-v1 adapter: vLLM v1's real Scheduler, KVCacheManager and BlockPool, releases
0.10.1.1 to 0.34.0, one mapping with per-era shims (`eras.py`, whose era table lists every
release branch with its feature test).

    factory.py     registry entry point; declares capabilities; refuses older releases
    fit.py         fit_config (no vLLM import at module level)
    eras.py        the era table and its shims (vLLM imported inside functions only)
    shapes.py      what a release must hold (a newer release is checked before a run)
    adapter.py     the Engine protocol over the Scheduler (imports vLLM)
    build.py       builds the Scheduler as EngineCore would (imports vLLM)
    runner.py      the model runner's block tables (`_update_states`)
    mapping.py     vLLM's SchedulerOutput read as ours (a mixin of the adapter)
    sessions.py    resumable streaming-input sessions: later turns continue their parent's
    snapshot.py    KVSnapshot over vLLM's BlockPool and managers (imports vLLM)
    changes.py     which blocks the BlockPool changed (incremental pool check)
    hash_index.py  what each block hash means (pool check)
    options.py     --vllm-option scheduler options (imports vLLM where used)
    frontend.py    the API server's admission check
    paths.py       rare-path counters (same-step preemption, sliding-window frees)
"""
