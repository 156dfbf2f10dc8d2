"""What a campaign's driver shows while it runs: a tqdm bar, or JSON lines for machines.

Both read the campaign's messages (worker processes' or Ray tasks'): examples so far and
per second across every worker or node, findings so far, rounds in flight (Ray).

    fuzz:  1,024ex [00:12, 85.1ex/s, findings=1, in flight=4, found shadow-kv.read]
    {"elapsed_s": 12.0, "examples": 1024, "examples_per_s": 85.1, "repeats": 130, ...}
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO


class ProgressCounts:
    """Running totals of a campaign's messages."""

    def __init__(self) -> None:
        self.started_s = time.monotonic()
        self.examples = 0
        self.repeats = 0  # examples a worker judged from memory (fuzz/verdict_memo.py)
        self.findings = 0
        self.in_flight: int | None = None
        self.last_kind = ""

    def add(self, message: dict[str, Any]) -> None:
        if message["type"] == "progress":
            self.examples += int(message["examples"])
            self.repeats += int(message.get("repeats", 0))
        elif message["type"] == "finding":
            self.findings += 1
        if message["type"] in ("raw", "finding"):
            self.last_kind = str(message["kind"])
        if "in_flight" in message:
            self.in_flight = int(message["in_flight"])

    def as_json(self) -> dict[str, Any]:
        elapsed_s = time.monotonic() - self.started_s
        return {
            "elapsed_s": round(elapsed_s, 3),
            "examples": self.examples,
            "examples_per_s": round(self.examples / elapsed_s, 1) if elapsed_s > 0 else 0.0,
            "repeats": self.repeats,
            "findings": self.findings,
            "in_flight": self.in_flight,
            "last_found": self.last_kind or None,
        }


class BarProgress:
    """A tqdm bar of examples on stderr (built only when stderr is a terminal)."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self.counts = ProgressCounts()
        self.bar = tqdm(desc="fuzz", unit="ex", file=sys.stderr, leave=False, dynamic_ncols=True)

    def __call__(self, message: dict[str, Any]) -> None:
        before = self.counts.examples
        self.counts.add(message)
        self.bar.update(self.counts.examples - before)
        words = [f"findings={self.counts.findings}"]
        if self.counts.in_flight is not None:
            words.append(f"in flight={self.counts.in_flight}")
        if self.counts.last_kind:
            words.append(f"found {self.counts.last_kind}")
        self.bar.set_postfix_str(", ".join(words), refresh=False)

    def close(self) -> None:
        self.bar.close()


class JsonLinesProgress:
    """One JSON object per progress or finding message, on `stream` (default stderr)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.counts = ProgressCounts()
        self.stream = stream if stream is not None else sys.stderr

    def __call__(self, message: dict[str, Any]) -> None:
        self.counts.add(message)
        if message["type"] in ("progress", "finding"):
            self.stream.write(json.dumps(self.counts.as_json(), sort_keys=True) + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.stream.flush()
