"""The paged cache: writes through slot_mapping and reads through slots are exact."""

from __future__ import annotations

import torch

from schedcheck.gpu.kv_cache import PagedKVCache


def _cache(**kw) -> PagedKVCache:
    args = dict(
        num_layers=2,
        num_blocks=32,
        block_size=4,
        num_kv_heads=2,
        head_dim=8,
        dtype=torch.float32,
        initial_blocks=2,
    )
    args.update(kw)
    return PagedKVCache(**args)


def test_write_then_gather_is_exact_and_skips_minus_one() -> None:
    cache = _cache(initial_blocks=8)
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(5, 2, 8, generator=gen)
    v = torch.randn(5, 2, 8, generator=gen)
    slots = torch.tensor([3, 4, -1, 17, 30])
    cache.write(1, k, v, slots)
    got_k, got_v = cache.gather(1, torch.tensor([3, 4, 17, 30]))
    keep = torch.tensor([0, 1, 3, 4])
    assert torch.equal(got_k, k[keep]) and torch.equal(got_v, v[keep])
    # slot 17 is block 4, offset 1, in vLLM's layout
    assert torch.equal(cache.key_cache[1][4, 1], k[3])
    assert torch.count_nonzero(cache.key_cache[0]) == 0  # the other layer untouched


def test_growth_keeps_content_and_zero_block() -> None:
    cache = _cache()
    assert cache.capacity == 2 and cache.zero_block_id == 2
    k = torch.ones(1, 2, 8)
    cache.write(0, k, 2 * k, torch.tensor([5]))
    cache.ensure(20)
    assert cache.capacity >= 21 and cache.zero_block_id == cache.capacity
    got_k, got_v = cache.gather(0, torch.tensor([5]))
    assert torch.equal(got_k, k) and torch.equal(got_v, 2 * k)
    assert torch.count_nonzero(cache.key_cache[0][cache.zero_block_id]) == 0
    assert cache.key_cache[0].shape == (cache.capacity + 1, 4, 2, 8)


def test_growth_is_capped_by_the_engine_block_count() -> None:
    cache = _cache(num_blocks=5)
    cache.ensure(4)
    assert cache.capacity == 5


def test_read_through_a_block_table_is_exact() -> None:
    cache = _cache(initial_blocks=16)
    table = [9, 2, 14]  # positions 0..3 in block 9, 4..7 in block 2, 8..9 in block 14
    k = torch.randn(10, 2, 8, generator=torch.Generator().manual_seed(3))
    slots = torch.tensor([table[j // 4] * 4 + j % 4 for j in range(10)])
    cache.write(0, k, -k, slots)
    got_k, got_v = cache.read(0, table, 10)
    assert torch.equal(got_k, k) and torch.equal(got_v, -k)


def test_copy_block_copies_every_layer():
    import torch

    from schedcheck.gpu.kv_cache import PagedKVCache

    cache = PagedKVCache(2, num_blocks=8, block_size=4, num_kv_heads=1, head_dim=2)
    for layer in range(2):
        cache.key_cache[layer][1] = layer + 1.0
        cache.value_cache[layer][1] = -(layer + 1.0)
    cache.copy_block(1, 5)
    assert [float(cache.key_cache[layer][5].mean()) for layer in range(2)] == [1.0, 2.0]
    assert float(cache.value_cache[1][5].mean()) == -2.0
    assert torch.equal(cache.key_cache[0][1], cache.key_cache[0][5])
