"""Helpers of the SGLang adapter (`engines/sglang_engine.py`). `build`, `snapshot`,
`faults` import SGLang; `fit`, `rows` and `stubs` do not (the fuzzer's swarm imports
`fit` in processes that may never build an engine)."""
