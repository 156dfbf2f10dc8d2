"""KV-cache usage over steps: blocks in use, cached and free; prefix-hit tokens; the batch.

One row per recorded step, after the step ran (`blocks.py` says what each count means)::

    step  blocks_used  blocks_cached  blocks_free  hit_tokens  running  scheduled_tokens
    0     2            0              4            0           2        2
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schedcheck.report.replay import StepView

COLUMNS = (
    "step",
    "blocks_used",
    "blocks_cached",
    "blocks_free",
    "hit_tokens",
    "running",
    "scheduled_tokens",
)


@dataclass
class Usage:
    """Observer: one tuple per step, in COLUMNS order."""

    rows: list[tuple[int, ...]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # requests holding blocks now

    def observe(self, view: StepView) -> None:
        for rid in view.left:
            self.seen.discard(rid)
        hit_tokens = 0
        for r in view.output.scheduled:
            if r.request_id not in self.seen:  # (re)admitted this step
                hit_tokens += r.num_cached_tokens
                self.seen.add(r.request_id)
        blocks = view.blocks
        used = int((blocks.ref_cnt > 0).sum())
        cached = int(blocks.cached().sum())
        self.rows.append(
            (
                view.output.step,
                used,
                cached,
                blocks.num_blocks - used - cached,
                hit_tokens,
                len(view.output.scheduled),
                view.output.total_num_scheduled_tokens,
            )
        )

    def column(self, name: str) -> list[int]:
        index = COLUMNS.index(name)
        return [row[index] for row in self.rows]
