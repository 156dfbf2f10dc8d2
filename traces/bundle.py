"""A bundle: a directory holding everything needed to replay one run.

    BUNDLE/
      trace.jsonl        the requests (our trace schema), as replayed
      config.json        {"engine", "engine_config": {...}, "sim": {...}, "seed", "mutant",
                          "executor", "schedcheck_version"}
      schedule.jsonl     one SchedulerOutput per line (engines/schedule_io.py); a bundle
                         kept in the repo may hold schedule.jsonl.xz instead
      outputs.json       {request_id: [output token ids]} as the run produced them
      violations.json    [{"invariant", "step", "sim_time_s", "request_id", "position",
                           "slot", "block", "expected", "found", "message", ...}]
      summary.json       {"fingerprint", "steps", "requests", "finished", ...}
      command.txt        the exact command line that reproduces the run
      kv_events.jsonl    (a bundle with violations) the engine's block events per step:
                         {"step", "ref_cnt": [[block, n], ...], "cached": [[block, hash
                         hex or null], ...]} (sim/kv_events.py); read by the report

`schedcheck replay --bundle DIR` reruns it (same violations, same fingerprint);
`schedcheck verify DIR` replays its schedule on the tensor executor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedcheck.engines.protocol import SchedulerOutput
from schedcheck.engines.schedule_io import read_schedule, write_schedule

FILES = (
    "trace.jsonl",
    "config.json",
    "outputs.json",
    "violations.json",
    "summary.json",
    "command.txt",
)
KV_EVENTS = "kv_events.jsonl"  # optional
SCHEDULE_FILES = ("schedule.jsonl", "schedule.jsonl.xz")  # plain, or xz-compressed


@dataclass(frozen=True)
class Bundle:
    path: Path
    config: dict[str, Any]
    outputs: dict[str, list[int]]
    violations: list[dict[str, Any]]
    summary: dict[str, Any]
    command: str

    @property
    def trace_path(self) -> Path:
        return self.path / "trace.jsonl"

    def schedule(self) -> Iterator[SchedulerOutput]:
        return read_schedule(str(schedule_path(self.path)))


def schedule_path(root: Path) -> Path:
    """The bundle's schedule file: schedule.jsonl, else schedule.jsonl.xz."""
    for name in SCHEDULE_FILES:
        if (root / name).is_file():
            return root / name
    return root / SCHEDULE_FILES[0]


def write_bundle(
    path: str | os.PathLike[str],
    *,
    trace_lines: Iterable[str],
    config: Mapping[str, Any],
    schedule: Iterable[SchedulerOutput],
    outputs: Mapping[str, Iterable[int]],
    violations: Iterable[Mapping[str, Any]],
    summary: Mapping[str, Any],
    command: str,
    kv_events: Iterable[Mapping[str, Any]] | None = None,
) -> Path:
    """Write every file of a bundle; `trace_lines` are JSON objects, one per request;
    `kv_events` (optional) the engine's block events."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "trace.jsonl", "w", encoding="utf-8") as fh:
        for line in trace_lines:
            fh.write(line.rstrip("\n") + "\n")
    _write_json(root / "config.json", dict(config))
    write_schedule(str(root / "schedule.jsonl"), schedule)
    _write_json(root / "outputs.json", {k: list(v) for k, v in outputs.items()})
    _write_json(root / "violations.json", [dict(v) for v in violations])
    _write_json(root / "summary.json", dict(summary))
    (root / "command.txt").write_text(command.rstrip("\n") + "\n", encoding="utf-8")
    if kv_events is not None:
        with open(root / KV_EVENTS, "w", encoding="utf-8") as fh:
            for event in kv_events:
                fh.write(json.dumps(event, separators=(",", ":")) + "\n")
    return root


def read_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read a bundle; raises ValueError naming the missing or malformed file."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{root}: not a bundle directory")
    missing = [name for name in FILES if not (root / name).is_file()]
    if not schedule_path(root).is_file():
        missing.insert(2, " or ".join(SCHEDULE_FILES))
    if missing:
        raise ValueError(f"{root}: not a bundle, missing {', '.join(missing)}")
    return Bundle(
        path=root,
        config=_read_json(root / "config.json"),
        outputs=_read_json(root / "outputs.json"),
        violations=_read_json(root / "violations.json"),
        summary=_read_json(root / "summary.json"),
        command=(root / "command.txt").read_text(encoding="utf-8").strip(),
    )


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
