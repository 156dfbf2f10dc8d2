"""One step's sanitized plan as tensors on the model's device.

input_ids, positions (T,) int64   the rows, exactly as the runner metadata gives them
slot_mapping         (T,) int64   the plan's: -1 = skip the write
logits_indices       (S,) int64   rows whose logits are computed: the plan's sample_rows
                                  (metadata.logits_indices, and every spec row of a request
                                  with drafts, as vLLM's SpecDecodeMetadata.logits_indices)
attn                 AttnBatch    query_start_loc, seq_lens (int32), block table with
                                  every -1 replaced by the cache's zero block id
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from schedcheck.gpu.backends.base import AttnBatch
from schedcheck.gpu.step_plan import StepPlan


@dataclass(frozen=True)
class StepTensors:
    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    write_rows: torch.Tensor
    write_slots: torch.Tensor
    logits_indices: torch.Tensor
    attn: AttnBatch


def step_tensors(
    plan: StepPlan, zero_block_id: int, device: torch.device, softmax_scale: float
) -> StepTensors:
    md = plan.metadata
    table = np.where(plan.key_table >= 0, plan.key_table, zero_block_id).astype(np.int32)
    seq_lens = md.seq_lens.astype(np.int32)
    qsl = md.query_start_loc.astype(np.int32)

    def dev(array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(array)).to(device)

    attn = AttnBatch.from_host(qsl, seq_lens, table, md.block_size, softmax_scale, dev)
    rows = np.flatnonzero(plan.slot_mapping >= 0)
    return StepTensors(
        input_ids=dev(plan.input_ids),
        positions=dev(md.positions),
        slot_mapping=dev(plan.slot_mapping),
        write_rows=dev(rows),
        write_slots=dev(plan.slot_mapping[rows]),
        logits_indices=dev(plan.sample_rows),
        attn=attn,
    )
