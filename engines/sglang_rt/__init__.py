"""Helpers of the SGLang adapter (`engines/sglang_engine.py`); each imports SGLang."""
