"""Host-side shadow of what each KV slot holds, in the hash model's identities.

The engine loop's block-pool invariant asks an executor `block_contents(block_ids)`: the
identity (invariants/hash_model.py: a hash of the tokens 0..p) of the KV at each block's
last slot, and whether all its slots were written. The tensor executor answers from this
shadow, written with the same slot_mapping as the real cache:

    slot_identity[s] = identity(p) of the request whose row at position p wrote slot s
                       (xor POISON when the row's token was not the true token); 0 = never;
                       hash_model.DRAFT for a rejected draft row's KV (drafts.py) and the
                       drafter's lookahead KV: tokens not known, never the true KV

Identities of each request's true tokens are kept and extended incrementally.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from schedcheck.invariants import hash_model

U64 = npt.NDArray[np.uint64]


class IdentityShadow:
    def __init__(self, num_slots: int, block_size: int):
        assert num_slots >= block_size >= 1
        self.block_size = block_size
        self.slot_identity = np.zeros(num_slots, dtype=np.uint64)
        self._ids: dict[str, U64] = {}  # request id -> identity of each known position

    def identities(self, request_id: str, tokens: npt.NDArray[np.int64]) -> U64:
        """Identities of `tokens` (the request's true tokens), extending the cached ones."""
        have = self._ids.get(request_id)
        if have is None or have.size > tokens.size:
            have = hash_model.identities(tokens)
        elif have.size < tokens.size:
            start = have[-1] if have.size else np.uint64(0)
            more = hash_model.identities(tokens[have.size :], start, have.size)
            have = np.concatenate([have, more])
        self._ids[request_id] = have
        return have

    def forget(self, request_id: str) -> None:
        self._ids.pop(request_id, None)

    def write(self, slots: npt.NDArray[np.int64], identity: U64) -> None:
        keep = slots >= 0
        self.slot_identity[slots[keep]] = identity[keep]

    def copy_block(self, src: int, dst: int) -> None:
        bs = self.block_size
        self.slot_identity[dst * bs : (dst + 1) * bs] = self.slot_identity[
            src * bs : (src + 1) * bs
        ]

    def block_contents(self, block_ids: npt.NDArray[np.int64]) -> tuple[U64, np.ndarray]:
        """(identity at each block's last slot, whether every slot of it was written)."""
        base = block_ids.astype(np.int64) * self.block_size
        slots = base[:, None] + np.arange(self.block_size, dtype=np.int64)[None, :]
        content = self.slot_identity[slots]
        return content[:, -1], (content != 0).all(axis=1)


def row_identities(
    shadow: IdentityShadow,
    req_ids: tuple[str, ...],
    row_request: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64],
    input_ids: npt.NDArray[np.int64],
    tokens: dict[str, npt.NDArray[np.int64]],
    rejected: npt.NDArray[np.bool_],
) -> U64:
    """The identity each row writes: identity(p) of its true tokens, poisoned if wrong;
    DRAFT for a `rejected` draft row."""
    out = np.zeros(positions.size, dtype=np.uint64)
    for i, rid in enumerate(req_ids):
        true = tokens.get(rid)
        rows = np.flatnonzero(row_request == i)
        if true is None or rows.size == 0:
            continue
        ids = shadow.identities(rid, true)
        pos = positions[rows]
        inside = pos < true.size
        ident = np.full(rows.size, hash_model.POISON, dtype=np.uint64)
        ident[inside] = ids[pos[inside]]
        wrong = ~inside
        wrong[inside] = input_ids[rows[inside]] != true[pos[inside]]
        ident[wrong] ^= hash_model.POISON
        out[rows] = ident
    out[rejected] = hash_model.DRAFT
    return out
