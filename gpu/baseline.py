"""The baseline: each request alone, its whole true sequence in one dense causal forward.

No cache, no sharing, same weights and dtype; attention through the backend's `dense`
call. Every request's K/V per layer and final hidden states are kept, concatenated:

    request order   r0            r1                r2 ...
    rows            0 .. n0-1     n0 .. n0+n1-1     ...      offsets[r] = first row of r
    keys[l]         (N, Hk, D)    values[l] likewise          hidden (N, hidden_size)

so the baseline K of request r at position p is keys[l, offsets[r] + p].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from schedcheck.gpu.backends.base import AttentionBackend
from schedcheck.gpu.model import LlamaModel


@dataclass(frozen=True)
class Baseline:
    offsets: dict[str, int]
    lengths: dict[str, int]
    keys: torch.Tensor  # (L, N, Hk, D)
    values: torch.Tensor  # (L, N, Hk, D)
    hidden: torch.Tensor  # (N, hidden_size)
    kv_scale: torch.Tensor  # (L,) max |K|, |V| of each layer, fp64 on the host

    def rows(
        self, req_ids: Sequence[str], owner: npt.NDArray[np.int64], positions: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """Baseline row of each (req_ids[owner[t]], positions[t]); -1 where the request is
        unknown or the position lies past its tokens."""
        offset = np.array([self.offsets.get(r, -1) for r in req_ids], dtype=np.int64)
        length = np.array([self.lengths.get(r, 0) for r in req_ids], dtype=np.int64)
        if owner.size == 0:
            return np.zeros(0, dtype=np.int64)
        valid = (offset[owner] >= 0) & (positions >= 0) & (positions < length[owner])
        return np.where(valid, offset[owner] + positions, -1)


def run_baseline(
    model: LlamaModel, backend: AttentionBackend, sequences: Mapping[str, npt.NDArray[np.int64]]
) -> Baseline:
    """Dense forward of every request's true sequence, in request-id order."""
    assert sequences, "a baseline needs at least one request"
    order = sorted(sequences)
    keys, values, hidden = [], [], []
    offsets, lengths, total = {}, {}, 0
    scale = model.cfg.softmax_scale
    for rid in order:
        ids = torch.tensor(sequences[rid], dtype=torch.int64, device=model.device)
        positions = torch.arange(ids.numel(), device=model.device)
        per_layer: list[tuple[torch.Tensor, torch.Tensor]] = []

        def attend(
            layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kept: list = per_layer
        ) -> torch.Tensor:
            kept.append((k, v))
            return backend.dense(q, k, v, scale)

        with torch.inference_mode():
            hidden.append(model.forward(ids, positions, attend))
        keys.append(torch.stack([k for k, _ in per_layer]))
        values.append(torch.stack([v for _, v in per_layer]))
        offsets[rid], lengths[rid] = total, int(ids.numel())
        total += int(ids.numel())
    k_all, v_all = torch.cat(keys, dim=1), torch.cat(values, dim=1)
    kv_scale = torch.maximum(k_all.abs().amax(dim=(1, 2, 3)), v_all.abs().amax(dim=(1, 2, 3)))
    return Baseline(
        offsets, lengths, k_all, v_all, torch.cat(hidden), kv_scale.to("cpu", torch.float64)
    )
