"""The failure database under `.schedcheck/fuzz/`, replayed first by the next campaign.

    .schedcheck/fuzz/
      hypothesis/TARGET/    Hypothesis' DirectoryBasedExampleDatabase: the choice sequences
                            of failing examples; a round's reuse phase replays them first
      findings.jsonl        one line per finding: {"target", "bundle", "scenario" (or
                            null for a shrunk real trace), "kind", "headline"}

TARGET names what was fuzzed (engine, block manager, mutant), so a mutant's failures are
not replayed against another mutant. A campaign replays every finding of its target
before it draws a single example: a bug that is still there is found again in
milliseconds; one that is gone costs one run.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis.database import DirectoryBasedExampleDatabase

from schedcheck.fuzz.swarm import SwarmSpec, fixed_block_manager

DEFAULT_DB_DIR = Path(".schedcheck") / "fuzz"


def target_name(spec: SwarmSpec) -> str:
    """engine-blockmanager-mutant, with path-unsafe characters replaced."""
    manager = fixed_block_manager(spec) or "any"
    raw = f"{spec.engine}-{manager}-{spec.mutant or 'clean'}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)


@dataclass(frozen=True)
class FailureDB:
    root: Path

    def hypothesis_db(self, spec: SwarmSpec) -> DirectoryBasedExampleDatabase:
        return DirectoryBasedExampleDatabase(str(self.root / "hypothesis" / target_name(spec)))

    @property
    def findings_path(self) -> Path:
        return self.root / "findings.jsonl"

    def findings(self, spec: SwarmSpec) -> list[dict[str, Any]]:
        """This target's findings, oldest first; lines that do not parse are skipped."""
        if not self.findings_path.is_file():
            return []
        target = target_name(spec)
        out = []
        for line in self.findings_path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("target") == target:
                out.append(entry)
        return out

    def add(self, spec: SwarmSpec, entry: dict[str, Any]) -> None:
        """Append one finding (the same bundle is recorded once)."""
        bundle = str(entry.get("bundle"))
        if any(str(e.get("bundle")) == bundle for e in self.findings(spec)):
            return
        self.root.mkdir(parents=True, exist_ok=True)
        line = json.dumps({**entry, "target": target_name(spec)}, sort_keys=True)
        with open(self.findings_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
