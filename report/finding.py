"""Everything a finding's page shows, as data: built from a bundle's files alone.

header      the violation in words, engine and config, reproduce command, fingerprint
focus       the violating step, request and block (the block the violation names; else
            the slot's block; else the block of the offline replay's violation at that
            step; else the request's last block)
timeline    timeline.py      usage   usage.py
story       kv_story.py      grid    block_grid.py
verify      `schedcheck verify BUNDLE --json` outputs saved beside the bundle
            (verify*.json), if any
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedcheck.invariants.violation import Violation
from schedcheck.report.block_grid import BlockGrid, Grid
from schedcheck.report.engine_events import read_block_events
from schedcheck.report.kv_story import BadRead, BlockStory
from schedcheck.report.replay import engine_config, replay, unmodelled
from schedcheck.report.timeline import Mark, Timeline
from schedcheck.report.usage import Usage
from schedcheck.traces import read_trace
from schedcheck.traces.bundle import Bundle, read_bundle

CONFIG_KEYS = (
    "block_manager",
    "block_size",
    "num_gpu_blocks",
    "max_num_batched_tokens",
    "max_num_seqs",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "long_prefill_token_threshold",
    "num_lookahead_tokens",
    "mutant",
)


@dataclass(frozen=True)
class Focus:
    step: int
    request_id: str
    block: int  # -1: none
    why: str  # how the block was chosen


@dataclass
class Finding:
    bundle: Bundle
    header: list[tuple[str, str]]
    focus: Focus
    replay_violations: list[Violation]
    reproduced: bool | None  # the offline replay found the first recorded violation
    unmodelled: str | None  # what of the run the offline replay does not re-derive
    marks: list[Mark]
    request_ids: list[str]
    num_steps: int
    step_range: tuple[int, int]  # first and last recorded step
    usage: Usage
    story: BlockStory | None
    grid: Grid | None
    verify: list[dict[str, Any]]


def build_finding(path: str | Path) -> Finding:
    bundle = read_bundle(path)
    lengths = {r.request_id: r.output_length for r in read_trace(bundle.trace_path)}
    first = _first_pass(bundle) if _needs_first_pass(bundle) else None
    focus = choose_focus(bundle, first)
    num_blocks = int(engine_config(bundle)["num_gpu_blocks"])
    if not 0 <= focus.block < num_blocks and focus.block != -1:
        focus = Focus(focus.step, focus.request_id, -1, f"block {focus.block} is outside the cache")
    timeline, usage = Timeline(lengths, bundle.outputs), Usage()
    observers: list[Any] = [timeline, usage]
    story = grid = None
    if focus.block >= 0:
        story = BlockStory(focus.block, focus.step, bad_read(bundle, focus, first))
        story.engine = read_block_events(bundle.path, focus.block) or {}
        grid = BlockGrid(focus.step, focus.block, focus.request_id)
        observers += [story, grid]
    state = replay(bundle, observers)
    return Finding(
        bundle=bundle,
        header=header(bundle),
        focus=focus,
        replay_violations=state.violations,
        reproduced=None if unmodelled(bundle) else reproduced(bundle, state.violations),
        unmodelled=unmodelled(bundle),
        marks=timeline.finish(),
        request_ids=timeline.request_ids,
        num_steps=timeline.num_steps,
        step_range=(timeline.first_step, timeline.last_step),
        usage=usage,
        story=story,
        grid=grid.grid if grid else None,
        verify=read_verify(bundle.path),
    )


def header(bundle: Bundle) -> list[tuple[str, str]]:
    cfg = bundle.config
    engine_cfg = cfg.get("engine_config", {})
    summary = bundle.summary
    rows = [("violation", describe(bundle.violations[0]) if bundle.violations else _clean(bundle))]
    if len(bundle.violations) > 1:
        rows.append(("more", f"{len(bundle.violations) - 1} more violation(s) at the same step"))
    release = cfg.get("engine_version") or cfg.get("schedcheck_version")
    rows.append(("engine", str(cfg.get("engine", "?")) + (f" {release}" if release else "")))
    rows.append(
        ("config", ", ".join(f"{k} {engine_cfg[k]}" for k in CONFIG_KEYS if k in engine_cfg))
    )
    rows.append(("seed", str(cfg.get("seed", "?"))))
    rows.append(("reproduce", bundle.command))
    rows.append(("fingerprint", str(summary.get("fingerprint", "?"))))
    rows.append(
        (
            "run",
            f"{summary.get('steps', '?')} steps, {summary.get('requests', '?')} requests, "
            f"{summary.get('finished', '?')} finished, exit code {summary.get('exit_code', '?')}",
        )
    )
    return rows


def describe(v: dict[str, Any]) -> str:
    """The violation in words: its headline, then what was expected and found."""
    text = _violation(v).headline()
    if v.get("expected") or v.get("found"):
        text += f" (expected {v.get('expected', '')}; found {v.get('found', '')})"
    return text


def _clean(bundle: Bundle) -> str:
    stuck = bundle.summary.get("stuck") or {}
    if stuck:
        first = sorted(stuck)[0]
        return f"no violation recorded; liveness: {len(stuck)} stuck, e.g. {first}: {stuck[first]}"
    return "no violation recorded (a clean run)"


def _violation(v: dict[str, Any]) -> Violation:
    keys = ("invariant", "step", "message", "request_id", "position", "slot", "block")
    return Violation(**{k: v[k] for k in keys if k in v})


def _needs_first_pass(bundle: Bundle) -> bool:
    v = bundle.violations[0] if bundle.violations else {}
    return bool(v) and v.get("block", -1) < 0 and v.get("slot", -1) < 0


def _first_pass(bundle: Bundle) -> list[Violation]:
    return replay(bundle, []).violations


def choose_focus(bundle: Bundle, first: list[Violation] | None) -> Focus:
    bs = int(bundle.config.get("engine_config", {}).get("block_size", 16))
    if not bundle.violations:
        stuck = sorted(bundle.summary.get("stuck") or {})
        step = int(bundle.summary.get("steps", 1)) - 1
        return Focus(step, stuck[0] if stuck else "", -1, "no violation: no block to follow")
    v = bundle.violations[0]
    step, rid = int(v.get("step", 0)), str(v.get("request_id", ""))
    if v.get("block", -1) >= 0:
        return Focus(step, rid, int(v["block"]), "the block the violation names")
    if v.get("slot", -1) >= 0:
        return Focus(step, rid, int(v["slot"]) // bs, "the block of the slot the violation names")
    for w in first or []:
        if w.step == step and w.block >= 0 and w.request_id in (rid, ""):
            return Focus(
                step,
                w.request_id or rid,
                w.block,
                f"the block of the offline replay's {w.invariant}",
            )
    table = _table_at(bundle, rid, step)
    if table:
        return Focus(
            step, rid, table[-1], f"{rid}'s last block at step {step} (the violation names none)"
        )
    return Focus(step, rid, -1, "the violation names no block and its request holds none")


def _table_at(bundle: Bundle, rid: str, step: int) -> tuple[int, ...]:
    table: tuple[int, ...] = ()
    for out in bundle.schedule():  # bounded: the recorded schedule
        if out.step > step:
            break
        for r in out.scheduled:
            if r.request_id == rid:
                table = r.block_table
    return table


def bad_read(bundle: Bundle, focus: Focus, first: list[Violation] | None) -> BadRead | None:
    """The read (or write) the finding is about, if it names a slot in the focus block."""
    bs = int(bundle.config.get("engine_config", {}).get("block_size", 16))
    candidates = [dict(v) for v in bundle.violations[:1]]
    candidates += [w.to_json() for w in first or [] if w.step == focus.step]
    for v in candidates:
        slot = int(v.get("slot", -1))
        if slot >= 0 and slot // bs == focus.block:
            text = f"{v.get('request_id')} key {v.get('position')} slot {slot}: {v.get('message')}"
            return BadRead(
                focus.step, str(v.get("request_id", "")), int(v.get("position", -1)), slot, text
            )
    return None


def reproduced(bundle: Bundle, found: list[Violation]) -> bool | None:
    """Did the offline replay find the first recorded violation? None: not a shadow-KV one."""
    if not bundle.violations or not str(bundle.violations[0].get("invariant", "")).startswith(
        "shadow-kv."
    ):
        return None
    v = bundle.violations[0]
    keys = ("invariant", "step", "request_id", "position", "slot")
    want = tuple(v.get(k) for k in keys)
    return any(tuple(w.to_json()[k] for k in keys) == want for w in found)


def read_verify(root: Path) -> list[dict[str, Any]]:
    """`schedcheck verify --json` outputs saved beside the bundle (verify*.json)."""
    out = []
    for path in sorted(root.glob("verify*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and "verdict" in data:
            out.append({**data, "file": path.name})
    return out
