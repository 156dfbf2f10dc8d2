"""The conformance kit: small fixed scenarios that tell an adapter's author what is wrong.

- `checks.py`  the scenarios, each with what it requires of the engine's output
- `kit.py`     runs them against one engine (every invariant on), judges, reports
"""
