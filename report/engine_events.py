"""The engine's own view of one block, from BUNDLE/kv_events.jsonl (sim/kv_events.py).

Bundles with a violation written since kv_events existed carry it; older bundles do not,
and their pages say so. After step s the engine reported, for the block::

    ref_cnt 0; in the prefix cache as #1f2e3d4c     (or: not in the prefix cache)
"""

from __future__ import annotations

import json
from pathlib import Path

from schedcheck.traces.bundle import KV_EVENTS

HASH_CHARS = 8


def read_block_events(root: Path, block: int) -> dict[int, str] | None:
    """step -> what the engine's snapshot said of `block` after it; None: no kv_events."""
    path = root / KV_EVENTS
    if not path.is_file():
        return None
    ref_cnt, cached = 0, None
    out: dict[int, str] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON: {exc.msg}") from exc
            refs = {int(b): int(n) for b, n in event.get("ref_cnt", [])}
            hashes = {int(b): h for b, h in event.get("cached", [])}
            if block not in refs and block not in hashes:
                continue
            ref_cnt = refs.get(block, ref_cnt)
            cached = hashes.get(block, cached)
            where = f"in the prefix cache as #{cached[:HASH_CHARS]}" if cached else "not cached"
            out[int(event["step"])] = (
                f"engine after step {event['step']}: ref_cnt {ref_cnt}; {where}"
            )
    return out
