"""Per-step numerical checks of a replay against the baseline (a StepObserver).

For every step, after the forward (the cache then holds exactly what attention read):

    write  row t (request r, position p) wrote K/V  vs  baseline K/V of r at p, each layer
    read   key j < seq_len of request r, at slot key_slots[.]  vs  baseline K/V of r at j
           (only keys whose slot or slot content changed since verified: read_ledger.py)
    sample row t samples token s; baseline at (r, p) prefers b:
             s == b, |logprob diff| <= tol        -> fine
             s == b, diff > tol                   -> `logprob`, misalignment
             s != b, margin <= tie, diffs <= tol  -> `token`, near-tie
             s != b otherwise                     -> `token`, misalignment

Scheduled draft tokens (drafts.py): a rejected draft row's K/V is the draft's by design,
so it is not compared when written, nor are the keys of its request from its first rejected
row on when read in that step (only its rejected rows read them; their outputs are
discarded). Those keys stay "to be checked" in the read ledger: a later read of such a slot
before its owner rewrites it is compared with the baseline (`kv-read`). Samples are judged
at every sample row except rejected ones (with drafts, the accepted rows and the bonus's)::

    request with drafts   position  n-1   n     n+1   n+2     d1 accepted, d2 rejected
                          row       t     d1    d2    d3
    kv-write checked                yes   yes   -     -
    keys read, checked              0 .. n      -     -       (n+1, n+2: later readers)
    sample judged                   s0    s1    -     -

The drafter's lookahead writes (after the step's reads) count in the read ledger too.

Tolerance of layer l: kv_atol + kv_rtol * max|baseline K/V of layer l| (`tolerances.py`).
Only the first failing row (write) or key (read) of each request and step is reported:
the lowest failing layer, and in it the lowest position (a layer-0 error is the cache's own;
higher layers inherit errors through attention).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from schedcheck.gpu.baseline import Baseline
from schedcheck.gpu.batch import StepTensors
from schedcheck.gpu.findings import NEAR_TIE, Finding, misalignment
from schedcheck.gpu.model import LlamaModel
from schedcheck.gpu.read_ledger import ReadLedger
from schedcheck.gpu.step_plan import StepPlan
from schedcheck.gpu.tolerances import Tolerance

KV = tuple[torch.Tensor, torch.Tensor]
ITEMS_PER_CHUNK = 1 << 16  # rows or keys compared at once


class ReplayChecker:
    def __init__(self, baseline: Baseline, model: LlamaModel, tolerance: Tolerance, num_slots: int):
        """`num_slots`: slots of the cache including its zero block, (num_blocks + 1) * bs."""
        self.baseline = baseline
        self.model = model
        self.tol = tolerance
        self.kv_tol = tolerance.kv_atol + tolerance.kv_rtol * baseline.kv_scale.numpy()
        self.findings: list[Finding] = []
        self.num_sampled = 0
        self.max_kv_error = 0.0  # the largest K/V difference seen within tolerance
        self.max_logprob_error = 0.0
        self.ledger = ReadLedger(num_slots)
        self.kv_off: set[str] = set()  # requests with a K/V divergence so far: no near ties
        self.num_keys_checked = 0

    def on_step(
        self,
        plan: StepPlan,
        tensors: StepTensors,
        written: list[KV],
        hidden: torch.Tensor,
        logits: torch.Tensor,
        tokens: torch.Tensor,
        executor,
    ) -> None:
        self._check_writes(plan, written)
        self._check_reads(plan, tensors, executor.cache)
        self._check_samples(plan, logits, tokens)
        self.ledger.wrote(plan.draft_slots)  # the drafter writes after the step's reads

    # -- K/V ---------------------------------------------------------------------------
    def _errors(self, fetch: Callable[[int, int, int], KV], rows: np.ndarray) -> np.ndarray:
        """(L, N) max |found - baseline| over heads and dims, item by item; rows -1 give 0.

        `fetch(layer, lo, hi)` returns the found K and V of items lo..hi; items go in
        chunks of ITEMS_PER_CHUNK so memory stays bounded for long contexts."""
        base = self.baseline
        num_layers = base.keys.shape[0]
        out = np.zeros((num_layers, rows.size))
        for lo in range(0, rows.size, ITEMS_PER_CHUNK):
            hi = min(rows.size, lo + ITEMS_PER_CHUNK)
            idx = torch.as_tensor(np.maximum(rows[lo:hi], 0)).to(base.keys.device)
            for layer in range(num_layers):
                k, v = fetch(layer, lo, hi)
                dk = (k.to(torch.float64) - base.keys[layer, idx].to(torch.float64)).abs()
                dv = (v.to(torch.float64) - base.values[layer, idx].to(torch.float64)).abs()
                err = torch.maximum(dk.amax(dim=(1, 2)), dv.amax(dim=(1, 2)))
                out[layer, lo:hi] = err.cpu().numpy()
        out[:, rows < 0] = 0.0
        return out

    def _report_kv(
        self,
        kind: str,
        plan: StepPlan,
        errors: np.ndarray,
        owner: np.ndarray,
        positions: np.ndarray,
        slots: np.ndarray,
    ) -> None:
        bad = errors > self.kv_tol[:, None]  # (L, N)
        ok_errors = errors[~bad]
        if ok_errors.size:
            self.max_kv_error = max(self.max_kv_error, float(ok_errors.max()))
        any_bad = bad.any(axis=0)
        md, bs = plan.metadata, plan.metadata.block_size
        for i in np.unique(owner[any_bad]).tolist():
            mine = bad & (owner == i)[None, :]
            layer = int(np.flatnonzero(mine.any(axis=1))[0])  # lowest layer, then position
            n = int(np.flatnonzero(mine[layer])[0])
            slot = int(slots[n])
            self.kv_off.add(md.req_ids[i])
            self.findings.append(
                misalignment(
                    kind,
                    plan.step,
                    md.req_ids[i],
                    int(positions[n]),
                    f"{kind} at layer {layer}: |diff| {errors[layer, n]:.3g} > "
                    f"{self.kv_tol[layer]:.3g}",
                    slot=slot,
                    block=slot // bs if slot >= 0 else None,
                    layer=layer,
                    error=float(errors[layer, n]),
                    tolerance=float(self.kv_tol[layer]),
                )
            )

    def _check_writes(self, plan: StepPlan, written: list[KV]) -> None:
        md = plan.metadata
        rows = self.baseline.rows(md.req_ids, plan.row_request, md.positions)
        rows[plan.rejected_rows] = -1  # a rejected draft's K/V: not the true one, by design

        def fetch(layer: int, lo: int, hi: int) -> KV:
            return written[layer][0][lo:hi], written[layer][1][lo:hi]

        errors = self._errors(fetch, rows)
        self._report_kv("kv-write", plan, errors, plan.row_request, md.positions, md.slot_mapping)

    def _check_reads(self, plan: StepPlan, tensors: StepTensors, cache) -> None:
        """Compare every key read that may have changed since it was last verified."""
        md, attn = plan.metadata, tensors.attn
        self.ledger.wrote(plan.slot_mapping)
        starts, key_slots = attn.cu_seqlens_k_np, attn.key_slots_np
        owner_all = np.repeat(np.arange(md.num_reqs), attn.seq_lens_np)
        key_position = np.arange(key_slots.size) - starts[owner_all]
        rejected_keys = key_position >= _first_rejected(plan)[owner_all]  # read by them only
        need = self.ledger.to_check(md.req_ids, starts, key_slots) & ~rejected_keys
        keys = np.flatnonzero(need)
        owner = owner_all[keys]
        j = keys - starts[owner]
        rows = self.baseline.rows(md.req_ids, owner, j)
        checked = torch.as_tensor(key_slots[keys]).to(attn.key_slots.device)
        self.num_keys_checked += int(keys.size)

        def fetch(layer: int, lo: int, hi: int) -> KV:
            return cache.gather(layer, checked[lo:hi])

        errors = self._errors(fetch, rows)
        failed = rejected_keys.copy()  # rejected draft KV: check it at any later read
        failed[keys] = (errors > self.kv_tol[:, None]).any(axis=0)
        self.ledger.mark(md.req_ids, starts, key_slots, failed)
        table = plan.key_table[owner, j // md.block_size]
        slots = np.where(table >= 0, table * md.block_size + j % md.block_size, -1)
        self._report_kv("kv-read", plan, errors, owner, j, slots)

    # -- samples -------------------------------------------------------------------------
    def _check_samples(self, plan: StepPlan, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        """Judge the sample of every sample row but the rejected draft rows; `logits` and
        `tokens` are those of plan.sample_rows, in order."""
        md = plan.metadata
        sample_rows = plan.sample_rows
        positions = md.positions[sample_rows]
        rows = self.baseline.rows(md.req_ids, plan.row_request[sample_rows], positions)
        keep = np.flatnonzero((rows >= 0) & ~plan.rejected_rows[sample_rows])
        if keep.size == 0:
            return
        base_hidden = self.baseline.hidden[torch.as_tensor(rows[keep]).to(logits.device)]
        base_lp = torch.log_softmax(self.model.logits(base_hidden).to(torch.float64), dim=-1)
        lp = torch.log_softmax(
            logits[torch.as_tensor(keep).to(logits.device)].to(torch.float64), dim=-1
        )
        chosen = tokens[torch.as_tensor(keep).to(tokens.device)]
        preferred = base_lp.argmax(dim=-1)
        pick = torch.stack([chosen, preferred], dim=1)
        err = (lp.gather(1, pick) - base_lp.gather(1, pick)).abs().amax(dim=1)
        margin = (
            base_lp.gather(1, preferred[:, None])[:, 0] - base_lp.gather(1, chosen[:, None])[:, 0]
        )
        self.num_sampled += int(keep.size)
        for n, (e, m, s, b) in enumerate(
            zip(err.tolist(), margin.tolist(), chosen.tolist(), preferred.tolist(), strict=True)
        ):
            row = int(sample_rows[keep[n]])
            self._judge_sample(plan, row, int(positions[keep[n]]), e, m, s, b)

    def _judge_sample(
        self,
        plan: StepPlan,
        row: int,
        position: int,
        err: float,
        margin: float,
        chosen: int,
        preferred: int,
    ) -> None:
        rid = plan.metadata.req_ids[plan.row_request[row]]
        step, tol = plan.step, self.tol
        where: dict[str, Any] = dict(error=err, tolerance=tol.logprob_atol)
        if chosen == preferred and err <= tol.logprob_atol:
            self.max_logprob_error = max(self.max_logprob_error, err)
            return
        if chosen == preferred:
            self.findings.append(
                misalignment(
                    "logprob",
                    step,
                    rid,
                    position,
                    f"logprob of token {chosen} off by {err:.3g} > {tol.logprob_atol:.3g}",
                    **where,
                )
            )
        elif margin <= tol.tie_margin and err <= tol.logprob_atol and rid not in self.kv_off:
            self.findings.append(
                Finding(
                    "token",
                    NEAR_TIE,
                    step,
                    rid,
                    position,
                    f"token {chosen} instead of {preferred}: baseline margin {margin:.3g} <= "
                    f"{tol.tie_margin:.3g}, logprobs within {err:.3g}",
                    **where,
                )
            )
        else:
            self.findings.append(
                misalignment(
                    "token",
                    step,
                    rid,
                    position,
                    f"token {chosen} instead of {preferred}: baseline margin {margin:.3g}, "
                    f"logprob diff {err:.3g}",
                    **where,
                )
            )


def _first_rejected(plan: StepPlan) -> np.ndarray:
    """(B,) the position of each request's first rejected draft row; past any key (the
    largest int64) for a request without one."""
    md = plan.metadata
    first = np.full(md.num_reqs, np.iinfo(np.int64).max, dtype=np.int64)
    rows = np.flatnonzero(plan.rejected_rows)
    np.minimum.at(first, plan.row_request[rows], md.positions[rows])
    return first
