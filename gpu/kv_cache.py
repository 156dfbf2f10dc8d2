"""Paged KV cache in vLLM's layout: per layer K and V `[blocks, block_size, Hk, D]`.

    key_cache[layer]  (capacity + 1, block_size, num_kv_heads, head_dim)
                       block ids 0 .. capacity-1 are the engine's; block `capacity` is the
                       zero block, never written: invalid block-table entries read it
    slot s = block_id * block_size + offset  ->  key_cache[layer].view(-1, Hk, D)[s]

Writes go through `slot_mapping` (-1 = skip, vLLM's padding convention); reads through
block tables or gathered slot lists. The cache grows (geometrically, copying) up to
`num_blocks` as higher block ids appear, so a schedule with a large configured
`num_gpu_blocks` costs only the blocks it touches.
"""

from __future__ import annotations

import torch


class PagedKVCache:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        initial_blocks: int = 64,
    ):
        assert num_layers >= 1 and num_blocks >= 1 and block_size >= 1
        self.num_blocks = num_blocks  # the engine's block count: valid ids are below it
        self.block_size = block_size
        self.shape_tail = (block_size, num_kv_heads, head_dim)
        self.device = torch.device(device)
        self.dtype = dtype
        self.capacity = 0
        self.key_cache: list[torch.Tensor] = [self._empty(0) for _ in range(num_layers)]
        self.value_cache: list[torch.Tensor] = [self._empty(0) for _ in range(num_layers)]
        self.ensure(min(initial_blocks, num_blocks) - 1)

    @property
    def zero_block_id(self) -> int:
        """The index of the never-written zero block (one past the engine's ids in use)."""
        return self.capacity

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    def _empty(self, capacity: int) -> torch.Tensor:
        return torch.zeros((capacity + 1, *self.shape_tail), device=self.device, dtype=self.dtype)

    def ensure(self, max_block_id: int) -> None:
        """Grow so that block ids 0 .. max_block_id are backed (max_block_id < num_blocks)."""
        assert max_block_id < self.num_blocks, f"block {max_block_id} >= {self.num_blocks}"
        if max_block_id < self.capacity:
            return
        capacity = min(self.num_blocks, max(max_block_id + 1, 2 * self.capacity))
        for caches in (self.key_cache, self.value_cache):
            for layer, old in enumerate(caches):
                new = self._empty(capacity)
                new[: self.capacity] = old[: self.capacity]
                caches[layer] = new
        self.capacity = capacity

    def copy_block(self, src: int, dst: int) -> None:
        """Copy-on-write: block dst takes block src's K/V in every layer (before a forward)."""
        assert 0 <= src < self.num_blocks and 0 <= dst < self.num_blocks
        self.ensure(max(src, dst))
        for caches in (self.key_cache, self.value_cache):
            for cache in caches:
                cache[dst] = cache[src]

    def write(
        self, layer: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        """Row t of key/value (T, Hk, D) goes to slot slot_mapping[t]; -1 rows are skipped.

        Slots must be unique among the rows written (the step plan keeps the last writer).
        """
        assert key.shape == value.shape and key.shape[0] == slot_mapping.shape[0]
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        limit = self.capacity * self.block_size
        assert slots.numel() == 0 or int(slots.max()) < limit, "slot past the grown cache"
        for cache, rows in ((self.key_cache[layer], key), (self.value_cache[layer], value)):
            cache.view(-1, *self.shape_tail[1:]).index_copy_(0, slots, rows[keep].to(self.dtype))

    def write_rows(
        self,
        layer: int,
        key: torch.Tensor,
        value: torch.Tensor,
        rows: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        """key/value[rows[n]] goes to slot slots[n]: no host sync (the executor checked the
        slots on the host: unique, inside the grown cache)."""
        for cache, data in ((self.key_cache[layer], key), (self.value_cache[layer], value)):
            cache.view(-1, *self.shape_tail[1:]).index_copy_(0, slots, data[rows].to(self.dtype))

    def gather(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N,) slots -> K and V (N, Hk, D) copies; slots must lie in the grown cache."""
        flat_k = self.key_cache[layer].view(-1, *self.shape_tail[1:])
        flat_v = self.value_cache[layer].view(-1, *self.shape_tail[1:])
        return flat_k.index_select(0, slots), flat_v.index_select(0, slots)

    def read(
        self, layer: int, block_table: list[int] | tuple[int, ...], num_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of positions 0 .. num_tokens-1 of one request, through its block table:
        position j lives in block block_table[j // block_size] at offset j % block_size."""
        assert 0 <= num_tokens <= len(block_table) * self.block_size
        blocks = torch.as_tensor(list(block_table), dtype=torch.int64, device=self.device)
        tail = self.shape_tail[1:]
        k = self.key_cache[layer].index_select(0, blocks).reshape(-1, *tail)[:num_tokens]
        v = self.value_cache[layer].index_select(0, blocks).reshape(-1, *tail)[:num_tokens]
        return k, v
