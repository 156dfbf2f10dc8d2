"""Hashed block manager mutants: subclasses of the clean `HashedKVManager`
(engines/reference/hashed_manager.py) and `BlockHasher` (block_hash.py).

Most wrap a public method of the clean manager (`allocate_slots`, `cache_blocks`,
`get_computed_blocks`): they call it and then do what the buggy manager did on top, so the
clean per-step path stays as it is.
"""

from __future__ import annotations

from schedcheck.engines.reference.block_hash import BlockHasher
from schedcheck.engines.reference.hashed_manager import HashedKVManager
from schedcheck.engines.reference.kv_manager import EMPTY_HIT, PrefixHit, cdiv
from schedcheck.engines.reference.mutants.parts import EngineParts
from schedcheck.engines.reference.request import Request


class CachePartialBlock(HashedKVManager):
    """cache-partial-block (bug class 1, vllm#7753).

    Changes `cache_blocks`: the clean method caches the full blocks of
    [0, num_computed_tokens), ``num_computed_tokens // block_size`` of them; this one also
    caches the block a non-final chunk ends inside, ``cdiv(num_computed_tokens,
    block_size)`` (up to the request's last full block), under the hash of its full
    prompt content: a request with the same prefix reuses slots no one wrote.
    """

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        num_computed_tokens = super().cache_blocks(request, num_computed_tokens)
        if self.enable_caching:
            blocks = self.req_to_blocks[request.request_id]
            num_blocks = min(
                cdiv(num_computed_tokens, self.block_size),
                request.num_tokens // self.block_size,
                len(blocks),
            )
            self._cache(request, blocks, num_blocks)
        return num_computed_tokens


class NoCacheHitCap(HashedKVManager):
    """no-cache-hit-cap (bug class 2, vllm#7753).

    Changes `_max_cache_hit_tokens` (clean: num_tokens - 1): the hit is not capped, so a
    fully cached prompt whose length is a multiple of block_size gets num_computed_tokens ==
    num_tokens, has nothing to compute, never produces logits and never finishes.
    """

    def _max_cache_hit_tokens(self, request: Request) -> int:
        return request.num_tokens


class _AllocatesWholePrompt(HashedKVManager):
    """vLLM v0's block manager v1: blocks for the whole prompt at admission. Clean
    `allocate_slots` allocates for the hit + the first chunk (+ lookahead) only."""

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: PrefixHit = EMPTY_HIT,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        if request.num_computed_tokens == 0:  # admission: as if the chunk ran to the end
            num_rest_tokens = request.num_tokens - hit.num_tokens - num_lookahead_tokens
            num_new_tokens = max(num_new_tokens, num_rest_tokens)
        return super().allocate_slots(request, num_new_tokens, hit, num_lookahead_tokens)


class WholePromptComputed(_AllocatesWholePrompt):
    """whole-prompt-computed (bug class 3, vLLM v0 compute_full_blocks_in_seq).

    Allocates the whole prompt at admission (`_AllocatesWholePrompt`) and changes
    `cache_blocks`: the clean method caches blocks up to num_computed_tokens; after the
    first chunk ran this one caches every full prompt block, including the ones no chunk
    wrote yet.
    """

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        num_computed_tokens = super().cache_blocks(request, num_computed_tokens)
        if self.enable_caching:
            blocks = self.req_to_blocks[request.request_id]
            num_prompt_blocks = request.num_prompt_tokens // self.block_size
            self._cache(request, blocks, min(num_prompt_blocks, len(blocks)))
        return num_computed_tokens


class SameStepCached(_AllocatesWholePrompt):
    """same-step-cached (bug class 4, vllm#7822 / vllm#7619).

    Allocates the whole prompt at admission (`_AllocatesWholePrompt`) and changes
    `allocate_slots`: the clean method caches nothing (blocks are cached by `cache_blocks`
    after the step wrote them); this one caches every full block of the request at
    allocation, so a later request of the same step skips blocks its writer's chunk does not
    cover.
    """

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: PrefixHit = EMPTY_HIT,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        if not super().allocate_slots(request, num_new_tokens, hit, num_lookahead_tokens):
            return False
        blocks = self.req_to_blocks[request.request_id]
        self._cache(request, blocks, min(len(blocks), request.num_tokens // self.block_size))
        return True


class BlockTableShort(HashedKVManager):
    """block-table-short (bug class 5, vllm#7380 / vllm#7371).

    Changes `allocate_slots`: the clean method holds cdiv(n, block_size) blocks for n
    tokens; when n is a multiple of block_size (the chunk ends on a block boundary) this one
    holds one block fewer, so the last block of the chunk is missing. `cache_blocks` then
    caches only the blocks the table has (the clean one asserts the table covers them).
    """

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: PrefixHit = EMPTY_HIT,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        num_tokens_need_slot = (
            request.num_computed_tokens + hit.num_tokens + num_new_tokens + num_lookahead_tokens
        )
        if num_tokens_need_slot % self.block_size == 0:
            num_new_tokens -= self.block_size  # the bug: the slots of one block fewer
        return super().allocate_slots(request, num_new_tokens, hit, num_lookahead_tokens)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        num_table_tokens = len(self.req_to_blocks[request.request_id]) * self.block_size
        super().cache_blocks(request, min(num_computed_tokens, num_table_tokens))
        self._num_computed_tokens[request.request_id] = num_computed_tokens
        return num_computed_tokens


class ManagerComputedDisagree(HashedKVManager):
    """manager-computed-disagree (bug class 8, vllm#11186).

    The scheduler uses the capped prefix hit (clean `get_computed_blocks`); this manager
    also records the uncapped one, and books the difference (a block, on a fully cached
    prompt at a multiple of block_size) into its own num_computed_tokens and num_cached_block
    at every allocation and into its count after every step, where the clean methods book
    what the scheduler computed. From then on the two counts differ by a block.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool) -> None:
        super().__init__(num_blocks, block_size, enable_caching)
        self._uncapped_extra_tokens: dict[str, int] = {}

    def get_computed_blocks(self, request: Request) -> PrefixHit:
        hit = super().get_computed_blocks(request)
        if self.enable_caching:
            uncapped = self._longest_hit(
                request.block_hashes, request.num_tokens // self.block_size
            )
            num_extra_blocks = len(uncapped) - len(hit.block_ids)
            self._uncapped_extra_tokens[request.request_id] = num_extra_blocks * self.block_size
        return hit

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: PrefixHit = EMPTY_HIT,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        if not super().allocate_slots(request, num_new_tokens, hit, num_lookahead_tokens):
            return False
        extra = self._uncapped_extra_tokens.get(request.request_id, 0)
        self._num_computed_tokens[request.request_id] += extra
        self.num_cached_block[request.request_id] += extra // self.block_size
        return True

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        num_computed_tokens = super().cache_blocks(request, num_computed_tokens)
        extra = self._uncapped_extra_tokens.get(request.request_id, 0)
        self._num_computed_tokens[request.request_id] += extra
        return num_computed_tokens

    def free(self, request: Request, *, aborted: bool = False) -> None:
        super().free(request, aborted=aborted)
        self._uncapped_extra_tokens.pop(request.request_id, None)


class HashNoParent(BlockHasher):
    """hash-no-parent (bug class 9, vllm#12621).

    Changes `extend`: the clean method chains each block's hash from its parent's; this
    one hashes every block from the root, as if it were a prompt's first block (the extra
    keys still on block 0 only), so two blocks with the same tokens after different prefixes
    share a hash and KV built from other content is reused.
    """

    __slots__ = ()

    def extend(
        self,
        block_hashes: list[bytes],
        token_bytes: memoryview,
        num_tokens: int,
        extra_key: bytes,
    ) -> None:
        block_num_bytes = self.block_size * 8  # int64 tokens
        for index in range(len(block_hashes), num_tokens // self.block_size):  # bounded
            alone: list[bytes] = []
            start_byte = index * block_num_bytes
            block_bytes = token_bytes[start_byte : start_byte + block_num_bytes]
            super().extend(alone, block_bytes, self.block_size, extra_key if index == 0 else b"")
            block_hashes.append(alone[0])


class HashIgnoresSalt(BlockHasher):
    """hash-ignores-salt (bug class 9, GHSA-rm76-4mrf-v9r8).

    Changes `extend`: the clean method hashes the request's extra keys (its cache_salt)
    into block 0; this one drops them, so requests with different cache_salt share
    prefix-cache blocks.
    """

    __slots__ = ()

    def extend(
        self,
        block_hashes: list[bytes],
        token_bytes: memoryview,
        num_tokens: int,
        extra_key: bytes,
    ) -> None:
        super().extend(block_hashes, token_bytes, num_tokens, b"")


PARTS: dict[str, EngineParts] = {
    "cache-partial-block": EngineParts(hashed=CachePartialBlock),
    "no-cache-hit-cap": EngineParts(hashed=NoCacheHitCap),
    "whole-prompt-computed": EngineParts(hashed=WholePromptComputed),
    "same-step-cached": EngineParts(hashed=SameStepCached),
    "block-table-short": EngineParts(hashed=BlockTableShort),
    "manager-computed-disagree": EngineParts(hashed=ManagerComputedDisagree),
    "hash-no-parent": EngineParts(hasher=HashNoParent),
    "hash-ignores-salt": EngineParts(hasher=HashIgnoresSalt),
}
