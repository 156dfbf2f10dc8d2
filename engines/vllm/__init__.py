"""The vLLM adapters: `v1/` (vLLM v1's Scheduler and KV-cache manager, releases 0.10.1.1 to
0.33.0) and `v0/` (vLLM 0.5.4 / 0.6.0's Scheduler and block managers), with what both share
in `common.py`.

Each adapter's `factory.py` (named in engines/registry.py), `fit.py` and `eras.py` import
no vLLM at module level, so the fuzzer can draw configs where vLLM is absent; the rest of
an adapter imports vLLM and is imported only when that engine is built.
"""
