"""The tensor executor: one varlen forward per step over a real model and a paged cache.

Implements `schedcheck.engines.executor.Executor`. Per step it reads only the step's
`RunnerMetadata` (input_ids, positions, slot_mapping, query_start_loc, seq_lens, block
tables, logits_indices):

    plan_step (numpy)  ─► invalid slots / blocks / tokens become findings, arrays sanitized
    step_tensors       ─► tensors on the device
    model.forward      ─► per layer: cache.write(k, v, slot_mapping); backend.paged(q, cache)
    logits[sample_rows] ─► greedy argmax ─► {request id: token}
    scheduled drafts   ─► the sampler accepts the longest prefix of a request's drafts equal
                          to the samples of the rows before them (drafts.py); its token is
                          the bonus after them, the drafts it accepted are in
                          `accepted_token_ids` (request id -> drafts), as the symbolic
                          executor's
    draft writes       ─► speculative decoding: each sampling request's drafter writes
                          draft K/V (here: its sampled row's K/V, which is not the KV of
                          the draft positions) through lookahead_slot_mapping

A slot -1 or a block id out of range never crashes: it is a `misalignment` finding in
`executor.findings` (writes skipped, reads of the zero block); `violations` holds the last
step's findings as invariants' Violations (`tensor.<kind>`) for the engine loop, and
`block_contents` answers the block-pool invariant from a hash-model shadow (shadow.py).
The executor's oracle of what the chunks hold is each request's true prompt
(`add_request`) plus the tokens it sampled; a replay sets the whole true sequence up front
(`set_true_tokens`).

An observer (see `checks.py`) may watch each step: `on_step(plan, tensors, written, hidden,
logits, tokens, executor)` with `written` = per layer (K, V) of every row.

The engine loop loads the executor lazily by name, `schedcheck.gpu.executor:make_executor`::

    make_executor(backend="auto", device="cpu", dtype="fp32", block_size=16,
                  num_blocks=27_000, seed=0, *, model_dir=None, model_config=None)
        -> TensorExecutor

    backend     torch-ref | flash-attn-4 | flash-attn | torch-flash | sdpa | auto
    device      "cpu" | "cuda" | "cuda:N"
    dtype       fp32 | bf16 | fp16 | fp64 (or a torch.dtype)
    block_size  the engine's block size; num_blocks: the engine's num_gpu_blocks (the cache
                grows on demand up to it)
    seed        weights from torch.Generator(seed) unless model_dir (a local safetensors
                directory, see weights.py) is given; model_config: a ModelConfig
Raises BackendRefused (a ValueError) if the backend does not take the configuration.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.gpu.backends import choose_backend
from schedcheck.gpu.backends.base import AttentionBackend, BackendSpec
from schedcheck.gpu.batch import StepTensors, step_tensors
from schedcheck.gpu.drafts import num_accepted, rejected_rows
from schedcheck.gpu.dtypes import torch_dtype
from schedcheck.gpu.findings import Finding
from schedcheck.gpu.kv_cache import PagedKVCache
from schedcheck.gpu.model import LlamaModel, ModelConfig, make_model
from schedcheck.gpu.shadow import IdentityShadow, row_identities
from schedcheck.gpu.step_plan import StepPlan, plan_step
from schedcheck.invariants import hash_model
from schedcheck.invariants.violation import Violation

KV = tuple[torch.Tensor, torch.Tensor]


class StepObserver(Protocol):
    def on_step(
        self,
        plan: StepPlan,
        tensors: StepTensors,
        written: list[KV],
        hidden: torch.Tensor,
        logits: torch.Tensor,
        tokens: torch.Tensor,
        executor: TensorExecutor,
    ) -> None: ...


class TensorExecutor:
    def __init__(
        self,
        model: LlamaModel,
        backend: AttentionBackend,
        block_size: int,
        num_blocks: int,
        observer: StepObserver | None = None,
    ):
        cfg = model.cfg
        self.model = model
        self.backend = backend
        self.cache = PagedKVCache(
            cfg.num_layers,
            num_blocks,
            block_size,
            cfg.num_kv_heads,
            cfg.head_dim,
            device=model.device,
            dtype=model.dtype,
        )
        self.observer = observer
        self.findings: list[Finding] = []
        self.tokens: dict[str, npt.NDArray[np.int64]] = {}  # the oracle: true tokens
        self.forward_s = 0.0  # wall time inside model forward + sampling (synchronized)
        self.num_steps = 0
        self.violations: list[Violation] = []  # of the last step
        self.shadow = IdentityShadow(self.cache.num_slots, block_size)
        self.teacher_forced = False  # replay: the oracle holds the whole true sequences
        # request id -> the drafts the sampler accepted in the last step (requests with
        # scheduled drafts only); its sampled token is the bonus after them
        self.accepted_token_ids: dict[str, tuple[int, ...]] = {}

    # -- the Executor protocol -------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: npt.NDArray[np.int64]) -> None:
        if request_id not in self.tokens:
            self.tokens[request_id] = np.asarray(prompt_token_ids, dtype=np.int64).copy()

    def finish_request(self, request_id: str) -> None:
        self.tokens.pop(request_id, None)
        self.shadow.forget(request_id)

    def unsample(self, request_id: str, tokens: tuple[int, ...]) -> None:
        """Forget the request's last sampled `tokens` (the engine dropped them; a replay's
        oracle holds the true sequences and keeps them)."""
        known = self.tokens.get(request_id)
        if known is None or self.teacher_forced or not tokens:
            return
        assert known[known.size - len(tokens) :].tolist() == list(tokens), request_id
        self.tokens[request_id] = known[: known.size - len(tokens)]

    def execute(self, metadata: RunnerMetadata) -> dict[str, int]:
        for src, dst in metadata.output.block_copies:  # copy-on-write, before the forward
            if 0 <= src < self.cache.num_blocks and 0 <= dst < self.cache.num_blocks:
                self.cache.copy_block(src, dst)
                self.shadow.copy_block(src, dst)
        plan = plan_step(metadata, self.cache.num_blocks, self.tokens, self.model.cfg.vocab_size)
        self.findings.extend(plan.findings)
        self.violations = [_violation(f) for f in plan.findings]
        self._write_shadow(plan)
        self.cache.ensure(plan.max_block_id)
        assert plan.max_block_id < self.cache.capacity or plan.max_block_id < 0
        tensors = step_tensors(
            plan, self.cache.zero_block_id, self.model.device, self.model.cfg.softmax_scale
        )
        start = time.perf_counter()
        written, hidden, logits, tokens = self._forward(tensors)
        token_list = [int(t) for t in tokens.tolist()]  # synchronizes the device
        self.forward_s += time.perf_counter() - start
        self.num_steps += 1
        if self.observer is not None:
            self.observer.on_step(plan, tensors, written, hidden, logits, tokens, self)
        sampled = self._accept(plan, dict(zip(plan.sample_rows.tolist(), token_list, strict=True)))
        self._extend_oracle(plan, sampled)
        self._write_drafts(plan, written)  # after this step's reads (and their checks)
        return sampled

    def block_contents(self, block_ids: npt.NDArray[np.int64]) -> tuple[np.ndarray, np.ndarray]:
        """For the block-pool invariant: (identity at each block's last slot, complete)."""
        return self.shadow.block_contents(block_ids)

    # -- internals ---------------------------------------------------------------------
    def _write_shadow(self, plan: StepPlan) -> None:
        md = plan.metadata
        ident = row_identities(
            self.shadow,
            md.req_ids,
            plan.row_request,
            md.positions,
            md.input_ids,
            self.tokens,
            plan.rejected_rows,
        )
        self.shadow.write(plan.slot_mapping, ident)

    def _accept(self, plan: StepPlan, row_tokens: Mapping[int, int]) -> dict[str, int]:
        """{request id: token} of every sampling request (`row_tokens`: flattened row ->
        its greedy token): its logits row's token, or with K drafts the bonus after the
        drafts the sampler accepts (they go to `accepted_token_ids`)::

            rows     row-K  row-K+1 ... row        row: the request's logits row (its last)
            input    t      d1      ... dK
            sample   s0     s1      ... sK         accept d1..da while dj == s(j-1); bonus sa
        """
        md = plan.metadata
        drafts = _draft_counts(md)
        self.accepted_token_ids = {}
        sampled: dict[str, int] = {}
        for row, rid in zip(md.logits_indices.tolist(), md.sampling_req_ids, strict=True):
            i = int(plan.row_request[row])
            k = int(drafts[i])
            if k == 0 or k >= int(md.query_lens[i]):  # no drafts, or no row before them
                sampled[rid] = row_tokens[row]
                continue
            samples = np.asarray([row_tokens[r] for r in range(row - k, row + 1)], np.int64)
            proposed = md.input_ids[row - k + 1 : row + 1]
            a = num_accepted(proposed, samples)
            self.accepted_token_ids[rid] = tuple(int(d) for d in proposed[:a])
            sampled[rid] = int(samples[a])
        return sampled

    def _write_drafts(self, plan: StepPlan, written: list[KV]) -> None:
        """Draft K/V into the valid lookahead slots, in every layer: the K/V its request's
        sampling row wrote (a stand-in for the drafter's KV, wrong for those positions, as
        a rejected draft's is). The owner rewrites them before it reads them; anyone else
        who reads one reads a wrong entry."""
        keep = np.flatnonzero(plan.draft_slots >= 0)
        if keep.size == 0:
            return
        md = plan.metadata
        rows = md.query_start_loc[md.lookahead_req[keep] + 1] - 1  # each request's last row
        slots = plan.draft_slots[keep]
        self.shadow.write(slots, np.full(slots.size, hash_model.DRAFT, dtype=np.uint64))
        device = self.model.device
        rows_t = torch.as_tensor(rows, device=device)
        slots_t = torch.as_tensor(slots, device=device)
        with torch.inference_mode():
            for layer, (k, v) in enumerate(written):
                self.cache.write_rows(layer, k, v, rows_t, slots_t)

    def set_true_tokens(self, tokens: Mapping[str, npt.NDArray[np.int64]]) -> None:
        """Replay: the whole true sequence of every request is known up front; the
        executor's own samples (teacher forcing ignores them) no longer extend it."""
        self.tokens = {rid: np.asarray(t, dtype=np.int64) for rid, t in tokens.items()}
        self.teacher_forced = True

    def _forward(self, t: StepTensors) -> tuple[list[KV], torch.Tensor, torch.Tensor, torch.Tensor]:
        written: list[KV] = []

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
            self.cache.write_rows(layer, k, v, t.write_rows, t.write_slots)
            written.append((k, v))
            return self.backend.paged(
                q, self.cache.key_cache[layer], self.cache.value_cache[layer], t.attn
            )

        with torch.inference_mode():
            hidden = self.model.forward(t.input_ids, t.positions, attend)
            rows = hidden[t.logits_indices]
            logits = self.model.logits(rows)
            tokens = logits.argmax(dim=-1)
        return written, rows, logits, tokens

    def _extend_oracle(self, plan: StepPlan, sampled: Mapping[str, int]) -> None:
        """A token sampled right after the request's last known position extends its true
        tokens, after the drafts the sampler accepted there; the slots of those drafts'
        rows then hold true KV (the shadow wrote DRAFT there: not known before)."""
        if self.teacher_forced:
            return
        md, drafts = plan.metadata, _draft_counts(plan.metadata)
        for row, rid in zip(md.logits_indices.tolist(), md.sampling_req_ids, strict=True):
            known = self.tokens.get(rid)
            accepted = self.accepted_token_ids.get(rid)
            first = row if accepted is None else row - int(drafts[plan.row_request[row]])
            if known is not None and int(md.positions[first]) == known.size - 1:
                new = np.asarray([*(accepted or ()), sampled[rid]], dtype=np.int64)
                self.tokens[rid] = np.concatenate([known, new])
        if any(self.accepted_token_ids.values()):
            self._write_shadow_accepted(plan)

    def _write_shadow_accepted(self, plan: StepPlan) -> None:
        """Live: the identities of the draft rows the oracle now knows as true."""
        md = plan.metadata
        rows = np.flatnonzero(plan.rejected_rows & ~rejected_rows(md, self.tokens))
        ident = row_identities(
            self.shadow,
            md.req_ids,
            plan.row_request[rows],
            md.positions[rows],
            md.input_ids[rows],
            self.tokens,
            np.zeros(rows.size, dtype=bool),
        )
        self.shadow.write(plan.slot_mapping[rows], ident)


def _draft_counts(md: RunnerMetadata) -> npt.NDArray[np.int64]:
    """(B,) draft tokens scheduled per request (zeros when the step has none)."""
    if md.num_draft_tokens.size:
        return md.num_draft_tokens
    return np.zeros(md.num_reqs, dtype=np.int64)


def _violation(f: Finding) -> Violation:
    return Violation(
        f"tensor.{f.kind}",
        f.step,
        f.message,
        request_id=f.request_id,
        position=f.position,
        slot=-1 if f.slot is None else f.slot,
        block=-1 if f.block is None else f.block,
    )


def cpu_threads(device: str) -> None:
    """For the command-line entry points: on a CPU, the tiny model runs fastest on one
    thread (SCHEDCHECK_TORCH_THREADS overrides); a no-op on CUDA."""
    if torch.device(device).type == "cpu":
        torch.set_num_threads(int(os.environ.get("SCHEDCHECK_TORCH_THREADS", "1")))


def make_executor(
    backend: str = "auto",
    device: str = "cpu",
    dtype: Any = "fp32",
    block_size: int = 16,
    num_blocks: int = 27_000,
    seed: int = 0,
    *,
    model_dir: str | None = None,
    model_config: ModelConfig | None = None,
    observer: StepObserver | None = None,
) -> TensorExecutor:
    """The factory the engine loop loads by name (signature in the module docstring).

    On a CPU it sets torch to one thread (SCHEDCHECK_TORCH_THREADS overrides): the tiny
    model is fastest so, and two threads spinning on a loaded machine are 60x slower."""
    cpu_threads(device)
    torch_dt = torch_dtype(dtype) if isinstance(dtype, str) else dtype
    if model_dir is not None:
        from schedcheck.gpu.weights import load_model

        model = load_model(model_dir, device=device, dtype=torch_dt)
    else:
        model = make_model(model_config, seed=seed, device=device, dtype=torch_dt)
    cfg = model.cfg
    spec = BackendSpec.for_device(
        model.device,
        dtype=torch_dt,
        block_size=block_size,
        head_dim=cfg.head_dim,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
    )
    chosen = choose_backend(backend, spec)
    return TensorExecutor(model, chosen, block_size, num_blocks, observer=observer)
