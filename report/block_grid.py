"""The block tables of the requests involved in a finding, at its step, as a grid.

Rows: the violating request, the other holders of the focus block, and the live requests
that wrote its slots; columns: logical block index; a cell: the physical block id and how
the request came to hold it::

    logical      0        1        2
    r1           3 hit    5 hit    4 fresh      hit: within its prefix-cache hit (or partly)
    r0           0        3 shared              fresh: entered its table this step
                                                shared: another live request holds it too
At most WIDTH_MAX columns: long tables are cut to a window around the focus block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schedcheck.report.replay import StepView

CATEGORIES = ("held", "shared", "cache hit", "fresh")
ROWS_MAX = 8
WIDTH_MAX = 32


@dataclass(frozen=True)
class Grid:
    step: int
    block: int
    request_ids: tuple[str, ...]
    first_index: int  # logical index of the first column
    blocks: tuple[tuple[int | None, ...], ...]  # [row][column] physical id (None: past end)
    categories: tuple[tuple[str, ...], ...]  # [row][column] one of CATEGORIES, or ""


@dataclass
class BlockGrid:
    """Observer: tracks admissions and previous tables; builds the grid at `step`."""

    step: int
    block: int
    focus_request: str
    grid: Grid | None = None
    hit_blocks: dict[str, int] = field(default_factory=dict)  # request -> blocks hit
    previous: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def observe(self, view: StepView) -> None:
        out, bs = view.output, view.blocks.block_size
        for rid in view.left:
            self.hit_blocks.pop(rid, None)
            self.previous.pop(rid, None)
        for r in out.scheduled:
            if r.request_id not in self.hit_blocks:
                self.hit_blocks[r.request_id] = -(-r.num_cached_tokens // bs)  # partial too
        if out.step == self.step:
            self.grid = self._build(view)
        for r in out.scheduled:
            self.previous[r.request_id] = r.block_table

    def _build(self, view: StepView) -> Grid:
        rows = involved(view, self.block, self.focus_request)
        tables = [view.tables.get(rid, ()) for rid in rows]
        width = max((len(t) for t in tables), default=0)
        first = 0
        if width > WIDTH_MAX:
            focus = next((t.index(self.block) for t in tables if self.block in t), 0)
            first = max(0, min(focus - WIDTH_MAX // 2, width - WIDTH_MAX))
            width = first + WIDTH_MAX
        cells, cats = [], []
        for rid, table in zip(rows, tables, strict=True):
            row = [table[i] if i < len(table) else None for i in range(first, width)]
            cells.append(tuple(row))
            cats.append(tuple(self._category(view, rid, table, i) for i in range(first, width)))
        return Grid(self.step, self.block, tuple(rows), first, tuple(cells), tuple(cats))

    def _category(self, view: StepView, rid: str, table: tuple[int, ...], index: int) -> str:
        if index >= len(table):
            return ""
        if index < self.hit_blocks.get(rid, 0):
            return "cache hit"
        previous = self.previous.get(rid, ())
        if index >= len(previous) or previous[index] != table[index]:
            return "fresh"
        block = table[index]
        shared = 0 <= block < view.blocks.num_blocks and view.blocks.ref_cnt[block] > 1
        return "shared" if shared else "held"


def involved(view: StepView, block: int, focus_request: str) -> list[str]:
    """The focus request, the block's holders, and the live writers of its slots."""
    shadow = view.shadow
    bs = shadow.block_size
    rows = [focus_request] if focus_request in view.tables else []
    rows += sorted(rid for rid, t in view.tables.items() if block in t)
    if 0 <= block < shadow.num_blocks:
        writers = shadow.writer_req[block * bs : (block + 1) * bs]
        rows += sorted(shadow.req_names[w] for w in set(writers.tolist()) if w >= 0)
    live = [rid for rid in dict.fromkeys(rows) if rid in view.tables]
    return live[:ROWS_MAX]
