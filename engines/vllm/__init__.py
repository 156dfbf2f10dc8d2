"""Helpers shared by the vLLM adapters (`engines/vllm_v1.py`, `engines/vllm_v0.py`).

Nothing here imports vLLM at module level except the version-specific modules
(`v1_build`, `v1_snapshot`, `v0_build`, `v0_snapshot`, `v0_runner`), which are imported only
by the adapter of that engine, so the default install never needs vLLM.
"""
